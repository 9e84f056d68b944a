//go:build tools

// Package tools keeps the etcd main package in go.mod/go.sum so `go mod tidy` does not prune it.
package tools

import _ "go.etcd.io/etcd/server/v3"
