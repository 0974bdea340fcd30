//go:build tools

package lesfarm

import (
	_ "github.com/danielgtaylor/huma/v2"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/pressly/goose/v3"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/robfig/cron/v3"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/testcontainers/testcontainers-go/modules/postgres"
	_ "golang.org/x/mobile/bind"
	_ "github.com/chromedp/chromedp"
	_ "golang.org/x/sys/unix"
	_ "gopkg.in/yaml.v3"
)
