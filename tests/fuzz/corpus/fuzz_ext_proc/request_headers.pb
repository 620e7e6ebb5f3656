!


:path/v1/chat/completions