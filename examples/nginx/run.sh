#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run.sh -- runs this recipe (nginx in front of an application, sluice asked first) on the
# ports you chose: the files are copied to a scratch directory with the addresses put in,
# sluice is checked where nginx will look for it, and nginx starts in the foreground.
#   HTTP=127.0.0.1:18080 APP=127.0.0.1:19000 LISTEN=127.0.0.1:18000 examples/nginx/run.sh
# HTTP: sluice's HTTP listener, as given to `make run HTTP=...` (default 127.0.0.1:8080);
# APP: the application (127.0.0.1:9000); LISTEN: nginx (127.0.0.1:8000); FAIL=closed for
# the fail-closed variant; NGINX: the nginx binary. Needs no root for ports above 1023.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
http=${HTTP:-127.0.0.1:8080}
app=${APP:-127.0.0.1:9000}
listen=${LISTEN:-127.0.0.1:8000}
fail=${FAIL:-open}
nginx=${NGINX:-nginx}
case "$fail" in open|closed) ;; *) echo "run.sh: FAIL must be open or closed" >&2; exit 2 ;; esac
for a in "$http" "$app" "$listen"; do
  case "$a" in *:[0-9]*) ;; *) echo "run.sh: '$a' is not HOST:PORT" >&2; exit 2 ;; esac
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-nginx.XXXXXX")
cp "$here"/*.conf "$dir"/
# Each address is written once in the recipe: replace it, and refuse a recipe that moved.
put() { # FILE OLD NEW
  local n
  n=$(grep -cF -- "$2" "$dir/$1" || true)
  if [ "$n" != 1 ]; then echo "run.sh: '$2' appears $n times in $1 (expected once)" >&2; exit 1; fi
  sed -i "s|$2|$3|" "$dir/$1"
}
put sluice-http.conf "server 127.0.0.1:8080;" "server $http;"
put nginx.conf "server 127.0.0.1:9000;" "server $app;"
put nginx.conf "listen 127.0.0.1:8000;" "listen $listen;"
put nginx.conf "include sluice-fail-open.conf;" "include sluice-fail-$fail.conf;"
# Unprivileged from a scratch directory: nginx's temporary files there.
temps=""
for t in client_body proxy fastcgi uwsgi scgi; do temps="$temps    ${t}_temp_path $dir/$t;\n"; done
sed -i "0,/^http {/s||http {\n$temps|" "$dir/nginx.conf"

# The check a silent fail-open needs: is sluice answering where nginx will ask?
host=${http%:*}; port=${http##*:}; host=${host#[}; host=${host%]}
if ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
  echo "run.sh: warning: nothing answers at $http (sluice's HTTP listener): until sluice runs" \
       "there, every request is $( [ "$fail" = open ] && echo "passed unlimited, with X-Sluice-Fail-Open" || echo "refused with 503")" >&2
fi
echo "run.sh: nginx on http://$listen -> application $app, sluice at $http (fail-$fail); files in $dir" >&2
exec "$nginx" -p "$dir" -c "$dir/nginx.conf" -g "daemon off; pid $dir/nginx.pid;"
