//go:build tools

// Package tools pins module dependencies that are used before their importers exist.
package tools

import (
	_ "github.com/getkin/kin-openapi/openapi3filter"
	_ "github.com/google/uuid"
	_ "github.com/gorilla/websocket"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "go.uber.org/zap/zaptest"
	_ "golang.org/x/sys/unix"
)
