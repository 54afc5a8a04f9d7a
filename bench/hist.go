package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram is a fixed-size log-linear latency histogram in the spirit of
// HdrHistogram: every power of two is split into 2^histSubBits linear
// buckets, so a recorded value is reported within 1/2^histSubBits (1.6%) of
// its true value, whatever its magnitude, in constant memory and O(1) per
// record. It is not safe for concurrent use: give each goroutine its own and
// Merge them.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	min    int64 // smallest value recorded (valid when n > 0)
	max    int64 // largest value recorded (valid when n > 0)
	sum    float64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	// Values below 2*histSub have one bucket each; every later power of two
	// 2^k (k = histSubBits+1 .. 62) has histSub buckets.
	histBuckets = (64 - histSubBits) << histSubBits
)

// bucketOf maps a non-negative value to its bucket index.
func bucketOf(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1 // v>>e is in [histSub, 2*histSub)
	return (e+1)<<histSubBits + int(v>>e) - histSub
}

// bucketRange returns the smallest value of bucket i and the bucket's width.
func bucketRange(i int) (low, width int64) {
	if i < 2*histSub {
		return int64(i), 1
	}
	e := i>>histSubBits - 1
	m := int64(i&(histSub-1) + histSub)
	return m << e, 1 << e
}

// Record adds one value; negative values count as zero.
func (h *histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if h.n == 0 || v > h.max {
		h.max = v
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o.
func (h *histogram) Merge(o *histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.n == 0 || o.max > h.max {
		h.max = o.max
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *histogram) Count() uint64 { return h.n }

// Mean is the exact mean of the recorded values (0 when empty).
func (h *histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Max is the largest recorded value, exactly (0 when empty).
func (h *histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the value at quantile q in [0, 1]: the midpoint of the
// bucket holding the ceil(q*n)-th smallest value, clamped to the exact
// minimum and maximum. It returns 0 when the histogram is empty.
func (h *histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	switch {
	case q <= 0:
		return time.Duration(h.min)
	case q >= 1:
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			low, width := bucketRange(i)
			v := low + (width-1)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// ms converts a duration to float milliseconds for reports.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
