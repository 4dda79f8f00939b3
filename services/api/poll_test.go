package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollUntilCallerDeadline: the caller's deadline passing during a try
// ends the poll as not done when an earlier try answered, and is the
// poll's error when no try has.
func TestPollUntilCallerDeadline(t *testing.T) {
	s := &Server{cfg: Config{MinPoll: time.Millisecond, MaxPoll: time.Millisecond}}
	// Each try after the first (or every try, with first false) blocks
	// until the caller's deadline passes, as a store call cut off by it.
	poll := func(first bool) (int, bool, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		tries := 0
		done, err := s.pollUntil(ctx, time.Now().Add(time.Hour), nil, nil, s.cfg.MinPoll, func() (bool, error) {
			tries++
			if first && tries == 1 {
				return false, nil
			}
			<-ctx.Done()
			return false, ctx.Err()
		})
		return tries, done, err
	}

	tries, done, err := poll(true)
	require.NoError(t, err, "an earlier try answered")
	require.False(t, done)
	require.Equal(t, 2, tries)

	tries, done, err = poll(false)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "no try answered: %v", err)
	require.False(t, done)
	require.Equal(t, 1, tries)
}
