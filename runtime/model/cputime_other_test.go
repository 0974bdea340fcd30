//go:build !linux

package model

import "time"

func threadCPU() time.Duration { return 0 }
