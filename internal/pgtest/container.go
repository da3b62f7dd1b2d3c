package pgtest

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// startContainer starts a throwaway PostgreSQL 15 container, for developer
// laptops with Docker and no local cluster. The container lives as long as the
// test process (testcontainers' reaper removes it).
func startContainer() (string, error) {
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return "", errors.New("no Docker engine (DOCKER_HOST unset, /var/run/docker.sock missing)")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:15",
		tcpostgres.WithDatabase("pgsweep"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmdArgs("-c", "max_connections=400", "-c", "fsync=off"),
	)
	if err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}
