package bench

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	if s.N != 100 || s.P50 != 50*time.Millisecond || s.P90 != 90*time.Millisecond || s.P99 != 99*time.Millisecond {
		t.Errorf("%+v", s)
	}
	if s.Mean != 50500*time.Microsecond {
		t.Errorf("mean %v", s.Mean)
	}
	if one := Summarize([]time.Duration{7}); one.P50 != 7 || one.P99 != 7 {
		t.Errorf("%+v", one)
	}
	if empty := Summarize(nil); empty.N != 0 {
		t.Errorf("%+v", empty)
	}
}
