package skel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/podnet/podnet/cni"
)

// NetConf is the part of the configuration on stdin that every plugin
// shares. A plugin decodes its own fields from CmdArgs.StdinData.
type NetConf struct {
	CNIVersion    string          `json:"cniVersion"`
	Name          string          `json:"name"`
	Type          string          `json:"type"`
	Capabilities  map[string]bool `json:"capabilities,omitempty"`
	IPAM          json.RawMessage `json:"ipam,omitempty"`
	DNS           *cni.DNS        `json:"dns,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	RuntimeConfig json.RawMessage `json:"runtimeConfig,omitempty"`
	RawPrevResult json.RawMessage `json:"prevResult,omitempty"`
	// PrevResult is RawPrevResult decoded and converted to CNIVersion;
	// nil when there is none.
	PrevResult *cni.Result `json:"-"`
	// ValidAttachments is what GC must keep.
	ValidAttachments []cni.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
}

func confError(format string, args ...any) error {
	return cni.Errorf(cni.CodeInvalidNetworkConfig, "config: "+format, args...)
}

// decodeConf decodes and checks the configuration: undecodable input is
// code 6; a document of the wrong shape is code 7. With an error, it
// still returns what it decoded, so that the error can be written in the
// configuration's version.
func decodeConf(data []byte) (*NetConf, error) {
	raw, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	var conf NetConf
	if err := json.Unmarshal(data, &conf); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, confError("%s: must be %s, got a JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		}
		return nil, confError("%v", err)
	}
	if _, ok := raw["cniVersion"]; !ok || conf.CNIVersion == "" {
		return &conf, confError("cniVersion is missing")
	}
	if conf.Name == "" {
		return &conf, confError("name is missing")
	}
	if err := cni.ValidateNetworkName(conf.Name); err != nil {
		return &conf, confError("name: %v", err)
	}
	if conf.Type == "" {
		return &conf, confError("type is missing")
	}
	if p := bytes.TrimSpace(conf.RawPrevResult); string(p) == "null" {
		conf.RawPrevResult = nil
	}
	return &conf, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "map", "struct":
		return "an object"
	case "slice":
		return "a list"
	case "bool":
		return "a boolean"
	}
	return goKind
}

// decodeObject checks that data is a JSON object.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, cni.Errorf(cni.CodeDecodingFailure, "no configuration on stdin")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, cni.Errorf(cni.CodeDecodingFailure, "cannot decode the configuration on stdin: %v", err)
	}
	if raw == nil {
		return nil, cni.Errorf(cni.CodeDecodingFailure, "the configuration on stdin is not a JSON object")
	}
	return raw, nil
}

// decodeVersionRequest reads VERSION's optional {"cniVersion": X}.
func decodeVersionRequest(data []byte) (string, error) {
	raw, err := decodeObject(data)
	if err != nil {
		return "", err
	}
	v, ok := raw["cniVersion"]
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", cni.Errorf(cni.CodeDecodingFailure, "VERSION: cniVersion must be a string, got %s", v)
	}
	return s, nil
}

// parsePrevResult decodes prevResult into the configuration's version.
// For DEL a bad prevResult is only logged: DEL must be able to clean up
// whatever the runtime sends.
func (inv *invocation) parsePrevResult(cmd cni.Verb) error {
	conf := inv.conf
	if conf.RawPrevResult == nil {
		return nil
	}
	res, err := cni.ParseResult(conf.RawPrevResult)
	if err == nil {
		res, err = res.ConvertTo(conf.CNIVersion)
	}
	if err != nil {
		e := cni.AsError(err, cni.CodeDecodingFailure)
		if cmd == cni.VerbDel {
			fmt.Fprintf(inv.stderr, "ignoring prevResult for DEL: %v\n", e)
			return nil
		}
		return cni.Errorf(e.Code, "config: prevResult: %s", e.Msg).WithDetails(e.Details)
	}
	conf.PrevResult = res
	return nil
}

func jsonBytes(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, cni.Errorf(cni.CodeInternal, "marshal: %v", err)
	}
	return b, nil
}
