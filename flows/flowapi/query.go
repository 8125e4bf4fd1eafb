package flowapi

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/podnet/podnet/flows"
)

// Path is where an agent serves its flows.
const Path = "/flows"

// DefaultLimit is how many recent records a request without limit gets.
const DefaultLimit = 1000

// The query parameters besides the filter's (flows.FilterParams).
const (
	ParamLimit  = "limit"
	ParamFollow = "follow"
)

// Query is one request for flows: the newest Limit records Filter
// selects (0: none), then, with Follow, every new one until the client
// goes.
type Query struct {
	Filter flows.Filter
	Limit  int
	Follow bool
}

// Values is q as query parameters (limit always set).
func (q Query) Values() url.Values {
	v := q.Filter.Query()
	v.Set(ParamLimit, strconv.Itoa(q.Limit))
	if q.Follow {
		v.Set(ParamFollow, "true")
	}
	return v
}

// ParseQuery reads a request's parameters; a limit above maxLimit (the
// ring's capacity) is maxLimit. Errors are *flows.ParamError, naming the
// parameter; so is a parameter /flows does not know.
func ParseQuery(v url.Values, maxLimit int) (Query, error) {
	for p := range v {
		if p != ParamLimit && p != ParamFollow && !slices.Contains(flows.FilterParams, p) {
			return Query{}, &flows.ParamError{Param: "parameter", Value: p,
				Want: "unknown: want " + strings.Join(append(slices.Clone(flows.FilterParams), ParamLimit, ParamFollow), ", ")}
		}
	}
	f, err := flows.ParseFilter(v)
	if err != nil {
		return Query{}, err
	}
	q := Query{Filter: f, Limit: min(DefaultLimit, maxLimit)}
	if s := v.Get(ParamLimit); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Query{}, &flows.ParamError{Param: ParamLimit, Value: s, Want: fmt.Sprintf("want a number of records, 0 to %d", maxLimit)}
		}
		q.Limit = min(n, maxLimit)
	}
	if s := v.Get(ParamFollow); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return Query{}, &flows.ParamError{Param: ParamFollow, Value: s, Want: "want true or false"}
		}
		q.Follow = b
	}
	return q, nil
}
