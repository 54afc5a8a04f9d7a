package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// codecPayload returns a batch payload (uvarint-framed entries, as logroom
// stores them) of at most rawBytes, and its entry count.
func codecPayload(kind string, rawBytes int) ([]byte, int) {
	var next func() []byte
	switch kind {
	case "demo":
		d := newDemoEntries(1, 0)
		next = d.next
	case "demo256":
		d := newDemoEntries(1, 256)
		next = d.next
	case "random256":
		next = func() []byte { return randomEntries(1, 256)[0] }
	default:
		panic(kind)
	}
	var p []byte
	n := 0
	for {
		e := next()
		if len(p)+binary.MaxVarintLen64+len(e) > rawBytes {
			return p, n
		}
		p = binary.AppendUvarint(p, uint64(len(e)))
		p = append(p, e...)
		n++
	}
}

type benchCodec struct {
	name string
	enc  func(dst, src []byte) []byte
	dec  func(dst, src []byte) ([]byte, error)
}

func benchCodecs(tb testing.TB) []benchCodec {
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		tb.Fatal(err)
	}
	zstdAt := func(level zstd.EncoderLevel) benchCodec {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1))
		if err != nil {
			tb.Fatal(err)
		}
		return benchCodec{name: "zstd-" + level.String(),
			enc: func(dst, src []byte) []byte { return enc.EncodeAll(src, dst[:0]) },
			dec: func(dst, src []byte) ([]byte, error) { return zdec.DecodeAll(src, dst[:0]) }}
	}
	return []benchCodec{
		{name: "s2", enc: s2.Encode, dec: s2.Decode},
		{name: "s2-better", enc: s2.EncodeBetter, dec: s2.Decode},
		zstdAt(zstd.SpeedFastest),
		zstdAt(zstd.SpeedDefault),
	}
}

// BenchmarkCodec measures the candidate batch codecs on one batch payload
// of realistic entries (the dfsmaster demo's enveloped namespace
// commands, natural size and packed into 256 B entries) and of random
// 256 B entries: ratio (raw / compressed), and encode and decode CPU per
// raw MB. Run with:
//
//	go test ./bench -run '^$' -bench Codec -benchtime 200x
func BenchmarkCodec(b *testing.B) {
	for _, raw := range []int{256 << 10, 1 << 20} {
		for _, kind := range []string{"demo", "demo256", "random256"} {
			src, n := codecPayload(kind, raw)
			for _, c := range benchCodecs(b) {
				b.Run(fmt.Sprintf("%s/%dKiB/%s", kind, raw>>10, c.name), func(b *testing.B) {
					comp := c.enc(nil, src)
					out, err := c.dec(make([]byte, 0, len(src)), comp)
					if err != nil || !bytes.Equal(out, src) {
						b.Fatalf("round trip: %v", err)
					}
					dst := make([]byte, 0, 2*len(src))
					plain := make([]byte, 0, len(src))
					var encT, decT time.Duration
					b.SetBytes(int64(len(src)))
					b.ReportAllocs()
					for b.Loop() {
						t0 := time.Now()
						dst = c.enc(dst[:cap(dst)], src)
						t1 := time.Now()
						plain, err = c.dec(plain[:cap(plain)], dst)
						decT += time.Since(t1)
						encT += t1.Sub(t0)
						if err != nil {
							b.Fatal(err)
						}
					}
					mb := float64(b.N) * float64(len(src)) / 1e6
					b.ReportMetric(float64(len(src))/float64(len(comp)), "ratio")
					b.ReportMetric(float64(encT.Microseconds())/1e3/mb, "enc-ms/MB")
					b.ReportMetric(float64(decT.Microseconds())/1e3/mb, "dec-ms/MB")
					b.ReportMetric(float64(len(src))/float64(n), "B/entry")
				})
			}
		}
	}
}
