// Package sdk is the Go client for Cubby and other E2B-compatible sandbox servers,
// including E2B's own cloud. It speaks the wire protocol of E2B's official SDKs
// (docs/wire/ in the repository): the control-plane REST API
// (docs/wire/e2b-api.md), envd's Connect RPC and /files endpoints inside each
// sandbox (docs/wire/envd.md) and the code-interpreter service on port 49999
// (docs/wire/code-interpreter.md).
//
// # Configuration
//
// Every entry point takes a [ConnectionOptions] (embedded in the per-call option
// structs; nil options mean "all defaults"). Unset fields come from the same
// environment variables the official SDKs read:
//
//	E2B_API_KEY      API key sent as X-API-KEY to the control plane (required)
//	E2B_API_URL      control-plane base URL (default https://api.<domain>)
//	E2B_SANDBOX_URL  base URL of every in-sandbox request (default per sandbox host)
//	E2B_DOMAIN       domain of the API and sandbox hosts (default e2b.app)
//	E2B_DEBUG        "true" talks to a local envd on localhost:49983 without the API
//
// A self-hosted Cubby server on one address needs
// E2B_API_URL=http://ADDR, E2B_SANDBOX_URL=http://ADDR and E2B_API_KEY.
//
// # Contexts, timeouts and cancellation
//
// Every method takes a [context.Context] first. Unary calls are also bounded by
// [ConnectionOptions.RequestTimeout] (60 s by default). Streaming calls
// (commands, PTYs, directory watches, code execution) have their own Timeout
// option (60 s by default, [NoTimeout] for none) that the server enforces as the
// process or stream lifetime. Cancelling the context of [Sandbox.RunCode]
// disconnects, which makes the server interrupt the running cell; cancelling the
// context of [Commands.Run] kills the command.
//
// # Errors
//
// Errors are typed and work with [errors.Is] and [errors.As]: [ErrNotFound]
// (sandbox, file, process or code context; see [*NotFoundError]),
// [*AuthenticationError], [*TimeoutError] (wrapping [ErrSandboxKilled] when the
// sandbox died while a request was in flight), [*CommandExitError],
// [*InvalidArgumentError], [*RateLimitError], [*ConnectionError] and
// [*APIError] for anything else. Context cancellation is reported with an error
// that wraps [context.Canceled].
//
// # Resources
//
// A [Sandbox] owns an HTTP transport. [Sandbox.Kill] and [Sandbox.Close]
// release its idle connections; call Close when you are done with a sandbox you
// do not kill.
package sdk
