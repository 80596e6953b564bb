// An agent that is not Python: one streamed chat completion with Node's fetch against OPENAI_BASE_URL (a capture
// gateway's rollout address), its text printed.
const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: "POST",
  headers: { Authorization: `Bearer ${process.env.OPENAI_API_KEY}`, "Content-Type": "application/json" },
  body: JSON.stringify({ model: "any", stream: true, messages: [{ role: "user", content: "Say hi." }] }),
});
if (!response.ok) throw new Error(`status ${response.status}`);
let text = "";
for (const line of (await response.text()).split("\n")) {
  if (line.startsWith("data: ") && line !== "data: [DONE]") text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? "";
}
console.log(text);
