package cni

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Code is a CNI error code. Codes 1-99 are the specification's; 100 and
// above are podnet's own.
type Code uint

// Error codes from the CNI specification 1.1.0, section "Error".
const (
	CodeIncompatibleVersion  Code = 1  // incompatible CNI version
	CodeUnsupportedField     Code = 2  // unsupported field in network configuration
	CodeUnknownContainer     Code = 3  // container unknown or does not exist
	CodeInvalidEnvironment   Code = 4  // invalid necessary environment variables
	CodeIOFailure            Code = 5  // I/O failure
	CodeDecodingFailure      Code = 6  // failed to decode content
	CodeInvalidNetworkConfig Code = 7  // invalid network config
	CodeTryAgainLater        Code = 11 // transient; the runtime should retry
	CodePluginNotAvailable   Code = 50 // STATUS: plugin cannot serve ADD
	CodeLimitedConnectivity  Code = 51 // STATUS: plugin has limited connectivity
)

// podnet's own codes (100 and above, as the specification reserves).
const (
	CodeInternal        Code = 100 // a bug or an unexpected condition inside podnet
	CodePluginNotFound  Code = 101 // the plugin binary is not in any CNI_PATH directory
	CodePluginCrashed   Code = 102 // the plugin exited without writing a CNI error
	CodeTimeout         Code = 103 // the plugin did not finish before the deadline
	CodeInvalidResult   Code = 104 // the plugin printed something that is not a valid result
	CodeAddressConflict Code = 105 // an address or route already belongs to someone else
	CodeNoFreeAddress   Code = 106 // the IPAM's eligible pools have no free address left
)

// Error is the error every podnet component returns for a CNI failure. It
// marshals to the specification's error JSON. Callers match on it with
// errors.As or on codes with IsCode, never by matching the message.
type Error struct {
	CNIVersion string `json:"cniVersion,omitempty"`
	Code       Code   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`

	// cause marks the runtime's own failures (see ErrPluginNotFound and
	// its siblings), which errors.Is finds through Unwrap.
	cause error
}

// The runtime's own failures. Codes of 100 and above are plugin-specific
// in the specification, so a third-party plugin may answer with the same
// number as one of podnet's codes: to know that the runtime itself could
// not find, run or understand a plugin, test with errors.Is against these,
// not with IsCode.
var (
	ErrPluginNotFound = errors.New("plugin not found")
	ErrPluginCrashed  = errors.New("plugin failed without a CNI error")
	ErrTimeout        = errors.New("plugin did not finish in time")
	ErrInvalidResult  = errors.New("plugin printed an invalid result")
)

// runtimeErrorf is Errorf for a failure of the runtime itself: the error
// also unwraps to the sentinel of its code.
func runtimeErrorf(code Code, format string, args ...any) *Error {
	e := Errorf(code, format, args...)
	switch code {
	case CodePluginNotFound:
		e.cause = ErrPluginNotFound
	case CodePluginCrashed:
		e.cause = ErrPluginCrashed
	case CodeTimeout:
		e.cause = ErrTimeout
	case CodeInvalidResult:
		e.cause = ErrInvalidResult
	}
	return e
}

// Unwrap returns the runtime sentinel, if any.
func (e *Error) Unwrap() error { return e.cause }

// Errorf builds an *Error whose message is formatted like fmt.Sprintf.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// WithDetails returns a copy of e with Details set.
func (e *Error) WithDetails(details string) *Error {
	c := *e
	c.Details = details
	return &c
}

func (e *Error) Error() string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + "; " + e.Details
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &cni.Error{Code: cni.CodeTryAgainLater}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Msg == ""
}

// JSON returns the specification's error document for e.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(e)
	return b
}

// AsError returns err as an *Error. An error that is not one already gets
// the fallback code and err's text as its message.
func AsError(err error, fallback Code) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: fallback, Msg: err.Error()}
}

// CodeOf returns the code of the first *Error in err's chain, or 0.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// IsCode reports whether err carries a CNI error with the given code.
func IsCode(err error, code Code) bool {
	return err != nil && CodeOf(err) == code
}
