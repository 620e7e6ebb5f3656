"ò
í{"model": "gpt-4o-mini", "user": "team-a", "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 400, "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Tell me about foxes."}]}
