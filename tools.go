//go:build tools

// Package lesfarm pins the project's library dependencies in go.mod while
// parallel work lands. It is never built into a binary.
package lesfarm

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/danielgtaylor/huma/v2"
	_ "github.com/danielgtaylor/huma/v2/adapters/humago"
	_ "github.com/danielgtaylor/huma/v2/humacli"
	_ "github.com/danielgtaylor/huma/v2/humatest"
	_ "github.com/danielgtaylor/huma/v2/sse"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/pressly/goose/v3"
	_ "github.com/pressly/goose/v3/lock"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/robfig/cron/v3"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/testcontainers/testcontainers-go"
	_ "github.com/testcontainers/testcontainers-go/modules/postgres"
	_ "golang.org/x/mobile/bind"
	_ "golang.org/x/sys/unix"
	_ "gopkg.in/yaml.v3"
)
