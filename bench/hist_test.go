package main

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBucketsCoverEveryValue(t *testing.T) {
	prev := -1
	check := func(v int64) {
		i := bucketOf(v)
		require.Less(t, i, histBuckets, "v=%d", v)
		require.GreaterOrEqual(t, i, prev, "buckets must not decrease: v=%d", v)
		prev = i
		low, width := bucketRange(i)
		require.LessOrEqual(t, low, v, "v=%d bucket %d", v, i)
		require.Less(t, v-low, width, "v=%d bucket %d", v, i)
		if v >= 2*histSub {
			require.LessOrEqual(t, float64(width)/float64(low), 1.0/histSub, "relative width at v=%d", v)
		}
	}
	for v := int64(0); v < 5000; v++ {
		check(v)
	}
	for v := int64(5000); v > 0 && v < math.MaxInt64/3; v = v*3/2 + 1 {
		check(v)
	}
	check(math.MaxInt64)
}

func TestQuantilesMatchSortedSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h histogram
	samples := make([]time.Duration, 100000)
	for i := range samples {
		// Log-normal-ish latencies from ~100µs to ~1s.
		d := time.Duration(math.Exp(rng.NormFloat64()*1.2+math.Log(2e6))) + 1
		samples[i] = d
		h.Record(d)
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := samples[int(math.Ceil(q*float64(len(samples))))-1]
		got := h.Quantile(q)
		require.InEpsilon(t, float64(exact), float64(got), 1.0/histSub, "q=%v", q)
	}
	require.Equal(t, samples[0], h.Quantile(0))
	require.Equal(t, samples[len(samples)-1], h.Quantile(1))
	require.Equal(t, uint64(len(samples)), h.Count())
}

func TestMergeEqualsRecordingEverything(t *testing.T) {
	var a, b, all histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&histogram{}) // empty: no effect
	require.Equal(t, all, m)
}

func TestEmptyAndNegative(t *testing.T) {
	var h histogram
	require.Zero(t, h.Quantile(0.99))
	require.Zero(t, h.Mean())
	h.Record(-time.Second)
	require.Equal(t, time.Duration(0), h.Quantile(0.5))
	require.Equal(t, uint64(1), h.Count())
}
