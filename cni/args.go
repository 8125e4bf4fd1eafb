package cni

import (
	"fmt"
	"strings"
)

// ParseArgs parses CNI_ARGS ("K1=V1;K2=V2") into ordered pairs. Empty
// segments (a trailing ';') are tolerated; a segment without '=' or with an
// empty key is an error naming it.
func ParseArgs(s string) ([][2]string, error) {
	if s == "" {
		return nil, nil
	}
	var out [][2]string
	for i, seg := range strings.Split(s, ";") {
		if seg == "" {
			continue
		}
		k, v, ok := strings.Cut(seg, "=")
		if !ok {
			return nil, Errorf(CodeInvalidEnvironment, "CNI_ARGS: segment %d %q is not KEY=VALUE", i, seg)
		}
		if k == "" {
			return nil, Errorf(CodeInvalidEnvironment, "CNI_ARGS: segment %d %q has an empty key", i, seg)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// FormatArgs writes pairs as CNI_ARGS. Keys and values must not contain ';'
// and keys must not contain '=': the format has no escaping.
func FormatArgs(args [][2]string) (string, error) {
	var b strings.Builder
	for i, kv := range args {
		if kv[0] == "" || strings.ContainsAny(kv[0], "=;") || strings.Contains(kv[1], ";") {
			return "", Errorf(CodeInvalidEnvironment, "CNI_ARGS: pair %d %q=%q cannot be encoded (no '=' or ';' in keys, no ';' in values)", i, kv[0], kv[1])
		}
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, "%s=%s", kv[0], kv[1])
	}
	return b.String(), nil
}
