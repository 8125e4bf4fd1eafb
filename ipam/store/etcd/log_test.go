package etcd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestZapToSlog: what the etcd client logs through zap reaches the slog
// logger the caller gave, with its fields, at the matching level, and
// below the handler's level not at all.
func TestZapToSlog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	z := zapLogger(l).Named("client").With(zap.String("endpoint", "127.0.0.1:2379"))
	z.Debug("dropped")
	z.Warn("retrying", zap.Error(errors.New("connection refused")), zap.Int("attempt", 3))
	got := buf.String()
	for _, want := range []string{"level=WARN", `msg=retrying`, "endpoint=127.0.0.1:2379", `error="connection refused"`, "attempt=3", "logger=client"} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %s", got, want)
		}
	}
	if strings.Contains(got, "dropped") {
		t.Errorf("a debug entry passed an info handler: %q", got)
	}
	zapLogger(nil).Error("nowhere") // discarded, and no panic
}
