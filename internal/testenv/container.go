package testenv

import (
	"context"
	"errors"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// startContainer starts PostgreSQL in a container when a Docker engine
// answers. It returns an error quickly when there is none.
func startContainer() (string, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !dockerAnswers(ctx) {
		return "", nil, errors.New("no Docker engine")
	}
	runCtx, runCancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer runCancel()
	c, err := tcpostgres.Run(runCtx, "postgres:16-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(2*time.Minute)),
	)
	if err != nil {
		return "", nil, err
	}
	dsn, err := c.ConnectionString(runCtx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, err
	}
	return dsn, func() { _ = testcontainers.TerminateContainer(c) }, nil
}

// dockerAnswers reports whether a Docker engine responds to a ping.
func dockerAnswers(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	return p.Health(ctx) == nil
}
