package store_test

import (
	"os"
	"testing"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
