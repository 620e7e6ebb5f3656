# SPDX-License-Identifier: Apache-2.0
# budget_lib.sh -- sourced by tests/perf/check_decision_cost.sh and check_protocol_cost.sh:
# the comparison of measured instruction counts with a budget file (lines "COMPILER NAME...
# BUDGET") and its --update. The caller sets cc, budget, margin and update, starts with
# fail=0 measured="", then calls budget_case NAME... PER for each case and budget_end.
budget_case() { # NAME... PER: the case's name (one or more words) and its measured count
  local per=${*: -1} name=${*:1:$#-1} want change
  measured+="$cc $name $per"$'\n'
  want=$(awk -v cc="$cc" -v n="$name" '{ k = $2; for (i = 3; i < NF; i++) k = k " " $i }
                                       $1 == cc && k == n { print $NF }' "$budget")
  if [ -z "$want" ]; then
    printf '%-14s %12s %12d %8s\n' "$name" "-" "$per" "no budget"
    [ "$update" = --update ] || fail=1
    return
  fi
  change=$(awk -v a="$per" -v b="$want" 'BEGIN {printf "%+.1f%%", (a - b) * 100 / b}')
  printf '%-14s %12d %12d %8s\n' "$name" "$want" "$per" "$change"
  if [ "$per" -gt $(( want + want * margin / 100 )) ]; then
    echo "  over budget: $name costs $per instructions, budget $want + $margin %" >&2
    fail=1
  fi
}

budget_end() { # SCRIPT ARGS...: writes the budget (--update) or says how to; exits
  if [ "$update" = --update ]; then
    { grep -v "^$cc " "$budget" || true; printf '%s' "$measured"; } > "$budget.new"
    mv "$budget.new" "$budget"
    echo "budget for $cc written to $budget"
    exit 0
  fi
  if [ $fail -ne 0 ]; then
    echo "over budget (or not measured, or no budget for $cc): if an increase is intended, run" >&2
    echo "  $*   --update   and commit $budget with the reason" >&2
  fi
  exit $fail
}
