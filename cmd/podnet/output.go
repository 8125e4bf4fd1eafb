package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Output formats. A command that prints a table today offers table and
// json, one that prints lines text and json; json is one indented
// document per invocation, of a struct type with json tags (the shapes
// are in docs/install-single-node.md, "Scripting and shell
// completion"), so that a script's jq keeps working across releases.
const (
	outputText  = "text"
	outputTable = "table"
	outputJSON  = "json"
)

// outputValue is the value of -o: only the command's formats are
// accepted, when the flag is parsed, so a bad value fails before the
// command does anything, with pflag's error naming the flag and the
// value (invalid argument "yaml" for "-o, --output" flag: want text or
// json).
type outputValue struct {
	p       *string
	allowed []string
}

func (v *outputValue) String() string { return *v.p }
func (v *outputValue) Type() string   { return "format" }

func (v *outputValue) Set(s string) error {
	if !slices.Contains(v.allowed, s) {
		return fmt.Errorf("want %s", strings.Join(v.allowed, " or "))
	}
	*v.p = s
	return nil
}

// addOutputFlag gives cmd -o/--output with the formats allowed (the
// first is the default), completed by the shell.
func addOutputFlag(cmd *cobra.Command, p *string, allowed ...string) {
	*p = allowed[0]
	cmd.Flags().VarP(&outputValue{p: p, allowed: allowed}, "output", "o", strings.Join(allowed, " or "))
	registerValues(cmd, "output", allowed...)
}

// textWriter is a report that prints itself for people.
type textWriter interface {
	writeText(w io.Writer) error
}

// writeOutput writes rep as format asks: its JSON document, or its text.
func writeOutput(w io.Writer, format string, rep textWriter) error {
	if format == outputJSON {
		return writeJSON(w, rep)
	}
	return rep.writeText(w)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// errorStrings are errs as strings, for a JSON report.
func errorStrings[E error](errs []E) []string {
	out := []string{}
	for _, err := range errs {
		out = append(out, err.Error())
	}
	return out
}
