package interop

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/podnet/podnet/cni"
)

// outcome is how a library took what a plugin printed: the result, or
// the error's CNI code and message.
type outcome struct {
	result string
	failed bool
	code   uint
	msg    string
}

func (o outcome) String() string {
	if o.failed {
		return fmt.Sprintf("error code %d %q", o.code, o.msg)
	}
	return "result " + o.result
}

// TestPluginOutput feeds both libraries the same plugin output, odd ones
// included, and compares what they make of it: results, and the code,
// message and details of plugin errors. Where podnet is stricter or
// converts where libcni does not, the case says so in wantDiff.
func TestPluginOutput(t *testing.T) {
	path := []string{noopBinDir(t)}
	cases := []struct {
		name     string
		version  string
		plugin   string // extra fields of the noop plugin's configuration
		verb     string
		wantDiff string
	}{
		{name: "result with extra fields", version: "1.0.0", verb: "ADD",
			plugin: `"addOutput":"{\"cniVersion\":\"1.0.0\",\"future\":1,\"ips\":[{\"address\":\"10.99.9.2/24\",\"extra\":true}]}"`},
		{name: "0.4.0 result, no version in ips", version: "0.4.0", verb: "ADD",
			plugin: `"addOutput":"{\"cniVersion\":\"0.4.0\",\"ips\":[{\"address\":\"10.99.9.2/24\"}]}"`},
		{name: "1.1.0 result with 1.1.0 fields", version: "1.1.0", verb: "ADD",
			plugin: `"addOutput":"{\"cniVersion\":\"1.1.0\",\"interfaces\":[{\"name\":\"eth0\",\"mtu\":1400,\"socketPath\":\"/s\",\"pciID\":\"0000:00:01.0\"}],\"ips\":[{\"address\":\"10.99.9.2/24\",\"interface\":0}],\"routes\":[{\"dst\":\"0.0.0.0/0\",\"gw\":\"10.99.9.1\",\"mtu\":1300,\"advmss\":1260,\"priority\":5,\"table\":100,\"scope\":0}]}"`},
		{name: "result without cniVersion", version: "1.0.0", verb: "ADD",
			// Both take it as the configuration's version.
			plugin: `"addOutput":"{\"ips\":[{\"address\":\"10.99.9.2/24\"}]}"`},
		{name: "result of an older version", version: "1.0.0", verb: "ADD",
			plugin: `"addOutput":"{\"cniVersion\":\"0.4.0\",\"ips\":[{\"version\":\"4\",\"address\":\"10.99.9.2/24\"}]}"`,
			// libcni returns (and caches) the result as printed; podnet
			// converts it to the network's version.
			wantDiff: "podnet converts to the list's version"},
		{name: "result of a newer version", version: "0.4.0", verb: "ADD",
			plugin:   `"addOutput":"{\"cniVersion\":\"1.1.0\",\"ips\":[{\"address\":\"10.99.9.2/24\"}]}"`,
			wantDiff: "podnet converts to the list's version"},
		{name: "0.2.0 result", version: "0.3.1", verb: "ADD",
			plugin: `"addOutput":"{\"cniVersion\":\"0.2.0\",\"ip4\":{\"ip\":\"10.99.9.2/24\"}}"`,
			// podnet reads results from 0.3.0 on only.
			wantDiff: "podnet refuses pre-0.3.0 results"},
		{name: "null", version: "1.0.0", verb: "ADD", plugin: `"addOutput":"null"`,
			// libcni turns "null" into an empty result.
			wantDiff: "podnet refuses null"},
		{name: "interface index out of range", version: "1.0.0", verb: "ADD",
			plugin:   `"addOutput":"{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.99.9.2/24\",\"interface\":3}]}"`,
			wantDiff: "podnet validates interface indexes"},
		{name: "nothing", version: "1.0.0", verb: "ADD", plugin: `"addOutput":""`},
		{name: "not JSON", version: "1.0.0", verb: "ADD", plugin: `"addOutput":"ok"`},
		{name: "ADD error", version: "1.0.0", verb: "ADD",
			plugin: `"fail":{"verb":"ADD","code":11,"msg":"try again","details":"the lock is busy"}`},
		{name: "DEL error", version: "0.4.0", verb: "DEL",
			plugin: `"fail":{"verb":"DEL","code":7,"msg":"bad config","details":"field x"}`},
		{name: "STATUS error", version: "1.1.0", verb: "STATUS",
			plugin: `"fail":{"verb":"STATUS","code":50,"msg":"no addresses left"}`},
		{name: "plugin-specific code", version: "1.1.0", verb: "ADD",
			plugin: `"fail":{"verb":"ADD","code":1234,"msg":"mine"}`},
		{name: "plugin-specific code podnet also uses", version: "1.1.0", verb: "ADD",
			plugin: `"fail":{"verb":"ADD","code":101,"msg":"the plugin's own 101"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := []byte(`{"cniVersion":"` + tc.version + `","name":"pnio-out","plugins":[{"type":"noop",` + tc.plugin + `}]}`)
			a := attachment{ContainerID: "pnio-out-ctr", NetNS: "/proc/self/ns/net", IfName: "eth0"}
			var got [2]outcome
			for i, mk := range bothLibraries {
				r := mk(path, filepath.Join(t.TempDir(), "cache"), nil)
				ctx := context.Background()
				var out []byte
				var err error
				switch tc.verb {
				case "ADD":
					out, err = r.add(ctx, conf, a)
				case "DEL":
					err = r.del(ctx, conf, a)
				case "STATUS":
					err = r.status(ctx, conf)
				}
				var typed bool
				got[i], typed = outcomeOf(t, out, err)
				if i == 1 && !typed {
					// libcni has no CNI error for output it cannot
					// read, podnet does (code 104): compare only that
					// both failed.
					got[0].code, got[0].msg = 0, ""
					got[1].code, got[1].msg = 0, ""
				}
			}
			same := got[0] == got[1]
			switch {
			case tc.wantDiff == "" && !same:
				t.Errorf("podnet and libcni differ:\n  podnet: %v\n  libcni: %v", got[0], got[1])
			case tc.wantDiff != "" && same:
				t.Errorf("podnet now does what libcni does (%v); the documented difference %q is gone: update this case", got[0], tc.wantDiff)
			case tc.wantDiff != "":
				t.Logf("known difference (%s):\n  podnet: %v\n  libcni: %v", tc.wantDiff, got[0], got[1])
			}
		})
	}
}

// outcomeOf describes what a library returned. typed says whether the
// error carried a CNI error (code and message) at all.
func outcomeOf(t *testing.T, out []byte, err error) (o outcome, typed bool) {
	t.Helper()
	if err == nil {
		return outcome{result: string(mustJSON(jsonValue(t, newNormalizer(nil).json(t, out))))}, false
	}
	o.failed = true
	var pe *cni.Error
	var le *types.Error
	switch {
	case errors.As(err, &pe):
		o.code, o.msg, typed = uint(pe.Code), pe.Msg, true
		if pe.Details != "" {
			o.msg += "; " + pe.Details
		}
	case errors.As(err, &le):
		o.code, o.msg, typed = uint(le.Code), le.Msg, true
		if le.Details != "" {
			o.msg += "; " + le.Details
		}
	}
	return o, typed
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	decode(t, s, &v)
	return v
}
