// Package httpx is the HTTP plumbing that the v1 transport (package api) and
// the legacy handlers (package legacy) share, so that neither imports the
// other: how a JSON answer is encoded and written, how its error is told to
// the request log and the metrics, how a request body is read, how the
// decoders reach the large-decode turns of the request's Manager (the rule
// is runtime's), how a group of handlers describes the routes it adds
// to the one server, and the write deadlines of answers (WriteBound,
// ProgressWriter; BoundWrites, the listeners' default for every other
// write). It changes when that shared contract does, and imports
// no other package of the project.
package httpx
