// Package docs holds the documents that README.md maps (protocol.md, the
// wire contract; architecture.md, cli.md, terminals.md, configuration.md,
// operations.md, images.md, development.md) and the tests that keep them
// true: every route, query parameter, field, state, event type, header and
// error code of api/openapi.yaml appears in protocol.md and the reverse;
// nothing in the repository refers to a path outside it; every ```sh block
// of README.md and docs/*.md runs as written (readme_test.go); every link
// and anchor resolves, and the README stays a map (links_test.go). The
// package table of architecture.md is checked in internal/deps, the
// configuration tables in cmd/sandbox-runtime (configdoc_test.go).
package docs
