// Package docs holds the protocol document (protocol.md) and the tests that
// keep it true: every route, query parameter, field, state, event type,
// header and error code of api/openapi.yaml appears in it and the reverse,
// and nothing in the repository refers to a path outside it.
package docs
