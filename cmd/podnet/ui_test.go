package main

import (
	"strings"
	"testing"
)

func TestUIRefusesNonLoopbackListen(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:7380", ":7380", "192.0.2.1:7380", "localhost:7380"} {
		root := newRootCommand()
		root.SetArgs([]string{"ui", "--listen", listen, "--agent", "http://127.0.0.1:9603"})
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), `--listen "`+listen+`"`) {
			t.Errorf("podnet ui --listen %s: %v, want an error naming the flag and value", listen, err)
		}
	}
}
