"""Capture scopes, as ART's: every chat completion (and Completions, Responses or Anthropic Messages call: `apis`
reads each as chat) an agent makes through httpx, aiohttp or requests inside `await
autorl.trajectory(coroutine)` (or `with autorl.Trajectory() as t:`) is recorded into a `Trajectory`, so an agent
written without a line of trajectory code trains. `scopes` holds the public names (re-exported by `autorl`),
`recorder` the httpx hooks and the scope stack, `clients` the aiohttp and requests hooks, `completions` what a
response body means (a JSON completion or a server-sent-events stream) as the `Choice` it recorded. For agents
outside this process: `gateway` (`CaptureGateway`), `rollouts` (what every gateway shares, `autorl serve`'s
included), `command` (`autorl capture`)."""
