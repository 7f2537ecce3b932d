//go:build !linux

package notify

import (
	"context"
	"errors"
	"time"
)

// newKernelSleeper: the poll waits on Go timers outside Linux.
func newKernelSleeper(context.Context, func() func()) (func(time.Duration) bool, func(), error) {
	return nil, nil, errors.New("waiting in the kernel is supported on Linux only")
}

// threadRunDelay: no schedstat outside Linux.
func threadRunDelay() (func() (time.Duration, bool), func(), error) {
	return nil, nil, errors.New("schedstat is Linux's")
}
