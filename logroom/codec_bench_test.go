package logroom

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
)

// BenchmarkCodec compresses and inflates a 256 KiB framed payload of
// DFS-like commands with each codec, reporting the stored fraction
// ("stored/raw") next to the time per uncompressed byte.
func BenchmarkCodec(b *testing.B) {
	var raw []byte
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"user", "alice", "bob", "logs", "warehouse", "tmp", "staging", "events", "part", "spark"}
	var entries [][]byte
	for i := range 4000 {
		path := fmt.Sprintf("/%s/%s/%s/dt=2026-11-%02d/%s-%05d-%08x.parquet", words[rng.IntN(3)], words[rng.IntN(len(words))],
			words[rng.IntN(len(words))], 1+rng.IntN(28), words[rng.IntN(len(words))], i, rng.Uint32())
		entries = append(entries, fmt.Appendf(nil, `{"op":"addblock","path":%q,"block":%d,"size":%d,"replication":3}`, path, rng.Uint64(), rng.IntN(1<<27)))
	}
	for _, e := range entries {
		if len(raw) > 256<<10 {
			break
		}
		raw = binary.AppendUvarint(raw, uint64(len(e)))
		raw = append(raw, e...)
	}
	for _, c := range []struct {
		name string
		enc  func([]byte) []byte
		dec  func([]byte) ([]byte, error)
	}{
		{"s2", func(r []byte) []byte { return s2.Encode(nil, r) }, func(z []byte) ([]byte, error) { return s2.Decode(nil, z) }},
		{"zstd", func(r []byte) []byte { return zstdEncode(nil, r) }, func(z []byte) ([]byte, error) { return zstdInflate(z, len(raw)) }},
	} {
		z := c.enc(raw)
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for range b.N {
				c.enc(raw)
			}
			b.ReportMetric(float64(len(z))/float64(len(raw)), "stored/raw")
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for range b.N {
				if _, err := c.dec(z); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
