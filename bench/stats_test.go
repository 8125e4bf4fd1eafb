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

func TestMedianOf(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	phase := func(add, del, wall int) Phase {
		return Phase{Name: "sequential", Parallel: 1,
			Add:  Summary{N: 100, P50: ms(add), P90: ms(add + 1), P99: ms(add + 2), Mean: ms(add)},
			Del:  Summary{N: 100, P50: ms(del), P90: ms(del + 1), P99: ms(del + 2), Mean: ms(del)},
			Wall: ms(wall)}
	}
	got := MedianOf([][]Phase{{phase(9, 20, 3000)}, {phase(12, 24, 3500)}, {phase(8, 21, 2900)}})
	want := phase(9, 21, 3000)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// An even count takes the lower middle; a short round is skipped.
	got = MedianOf([][]Phase{{phase(9, 20, 3000), phase(50, 60, 900)}, {phase(12, 24, 3500)}, {phase(8, 22, 2900), phase(70, 80, 1000)}})
	if len(got) != 2 || got[0] != phase(9, 22, 3000) || got[1].Add.P50 != ms(50) || got[1].Wall != ms(900) {
		t.Fatalf("got %+v", got)
	}
	if MedianOf(nil) != nil {
		t.Fatal("phases from no rounds")
	}
}
