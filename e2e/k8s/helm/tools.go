//go:build tools

// Package tools keeps the helm command package in go.mod/go.sum so `go mod tidy` does not prune it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
