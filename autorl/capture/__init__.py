"""Capture scopes, as ART's: every chat completion an agent makes through httpx inside `await
autorl.trajectory(coroutine)` (or `with autorl.Trajectory() as t:`) is recorded into a `Trajectory`, so an agent
written without a line of trajectory code trains. `scopes` holds the public names (re-exported by `autorl`),
`recorder` the httpx hooks and the scope stack, `completions` what a response body means (a JSON completion or
a server-sent-events stream) as the `Choice` it recorded."""
