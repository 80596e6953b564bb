#!/bin/sh
# An agent that is not Python: two chat completions with curl against OPENAI_BASE_URL (a capture gateway's rollout
# address), the second continuing the first with its reply and a user turn, then the rollout's reward.
set -eu
ask() {
  curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" \
    -H "Content-Type: application/json" -d "$1"
}
question='{"role": "user", "content": "Say hello."}'
first=$(ask "{\"model\": \"any\", \"messages\": [$question]}" | jq -c '.choices[0].message | {role, content}')
second=$(ask "{\"model\": \"any\", \"messages\": [$question, $first, {\"role\": \"user\", \"content\": \"Again.\"}]}")
reply=$(printf '%s' "$second" | jq -r '.choices[0].message.content')
curl -sf "${OPENAI_BASE_URL%/v1}/reward" -H "Authorization: Bearer $OPENAI_API_KEY" \
  -d "{\"reward\": $(( ${#reply} + ${BONUS:-0} )), \"metrics\": {\"turns\": 2}}" > /dev/null
