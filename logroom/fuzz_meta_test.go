package logroom

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Fuzz targets for the room, epoch and channel meta decoders (the batch
// decoder has FuzzDecodeBatch). Seeds live in testdata/fuzz/<target>/;
// LOGROOM_WRITE_SEEDS=1 go test -run TestWriteMetaFuzzSeeds regenerates them.
// A decode of arbitrary bytes must never panic, must fail with ErrCorrupt
// or return a value satisfying the decoder's checks, and must round-trip.

func FuzzDecodeChannelMeta(f *testing.F) {
	for _, s := range metaSeeds()["FuzzDecodeChannelMeta"] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeChannelMeta(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error without ErrCorrupt or ErrUnsupportedVersion: %v", err)
			}
			return
		}
		if m.Version != channelFormatVersion || m.First == 0 || (m.Sealed && m.Last+1 < m.First) {
			t.Fatalf("accepted invalid meta %+v", m)
		}
		ci := m.info(7)
		if ci.Num != 7 || ci.FirstIndex != m.First || ci.Sealed != m.Sealed {
			t.Fatalf("info %+v of %+v", ci, m)
		}
		again, err := decodeChannelMeta(encodeMeta(m))
		if err != nil || again != m {
			t.Fatalf("round trip: %+v -> %+v, %v", m, again, err)
		}
	})
}

func FuzzDecodeEpochMeta(f *testing.F) {
	for _, s := range metaSeeds()["FuzzDecodeEpochMeta"] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeEpochMeta(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error without ErrCorrupt or ErrUnsupportedVersion: %v", err)
			}
			return
		}
		if m.Version != epochFormatVersion {
			t.Fatalf("accepted version %d", m.Version)
		}
		if len(m.Owner) > len(data) {
			t.Fatalf("owner of %d bytes from %d input bytes", len(m.Owner), len(data))
		}
		again, err := decodeEpochMeta(encodeMeta(m))
		if err != nil || again != m {
			t.Fatalf("round trip: %+v -> %+v, %v", m, again, err)
		}
	})
}

// FuzzDecodeRoomMeta fuzzes the room znode check OpenRoom performs.
func FuzzDecodeRoomMeta(f *testing.F) {
	for _, s := range metaSeeds()["FuzzDecodeRoomMeta"] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeRoomMeta(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error without ErrCorrupt or ErrUnsupportedVersion: %v", err)
			}
			return
		}
		if (m.Version != roomFormatVersion || m.Room != 0) && (m.Version != roomFormatVersion2 || m.Room < 1) {
			t.Fatalf("accepted version %d room %d", m.Version, m.Room)
		}
		again, err := decodeRoomMeta(encodeMeta(m))
		if err != nil || again != m {
			t.Fatalf("round trip: %+v -> %+v, %v", m, again, err)
		}
	})
}

// metaSeeds are the seed inputs of the meta fuzz targets: valid metas,
// truncations, type confusion, hostile lengths and nesting.
func metaSeeds() map[string][][]byte {
	sealed := encodeMeta(channelMeta{Version: 1, First: 41, Epoch: 3, Sealed: true, Last: 80, Bytes: 4096, Batches: 7})
	open := encodeMeta(channelMeta{Version: 1, First: 81, Epoch: 4})
	epoch := encodeMeta(epochMeta{Version: 1, Epoch: 9, Owner: "master-a", Nonce: 0xdeadbeef})
	room := encodeMeta(roomMeta{Version: 1, Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()})
	hostile := hostileInputs()
	common := func(valid []byte) [][]byte {
		return [][]byte{
			valid,
			valid[:len(valid)/2],
			{},
			[]byte("garbage"),
			append(bytes.Clone(valid), 0xc0), // trailing byte
			hostile["hugeString"],
			hostile["hugeMap"],
			hostile["hugeArray"],
			hostile["deepNesting"][:64],
			{0x96, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06}, // struct as array
		}
	}
	return map[string][][]byte{
		"FuzzDecodeChannelMeta": append(common(sealed), open,
			encodeMeta(channelMeta{Version: 1, First: 0}),                            // first 0
			encodeMeta(channelMeta{Version: 1, First: 10, Sealed: true, Last: 5}),    // last below first-1
			encodeMeta(channelMeta{Version: 2, First: 1}),                            // unknown version
			encodeMeta(map[string]any{"v": 1, "first": "one", "sealed": "yes"}),      // wrong types
			encodeMeta(map[string]any{"v": 1, "first": -1, "last": uint64(1 << 63)}), // sign confusion
		),
		"FuzzDecodeEpochMeta": append(common(epoch),
			encodeMeta(epochMeta{Version: 1}),
			encodeMeta(map[string]any{"v": 1, "epoch": -5, "owner": 17}),
		),
		"FuzzDecodeRoomMeta": append(common(room),
			encodeMeta(map[string]any{"v": 1, "created": "yesterday"}),
		),
	}
}

// hostileInputs are msgpack inputs whose headers promise far more than
// they carry, and deep nesting under an unknown key.
func hostileInputs() map[string][]byte {
	return map[string][]byte{
		// {"owner": str32 of 4 GiB - 1}
		"hugeString": {0x81, 0xa5, 'o', 'w', 'n', 'e', 'r', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		// {"x": bin32 of 4 GiB - 1} (an unknown field, skipped)
		"hugeBin": {0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff, 'x'},
		// {"x": ext32 of 4 GiB - 1}
		"hugeExt": {0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'x'},
		// map32 of 4 Gi entries
		"hugeMap": {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},
		// array32 of 4 Gi elements (a struct decoded from an array)
		"hugeArray": {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		// {"x": [[[[…]]]]} 1 MiB deep: the largest a znode can hold
		"deepNesting": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...),
	}
}

// TestDecodeMetaHostile: the meta decoders refuse hostile inputs with
// ErrCorrupt, quickly and with memory linear in the input: a 10-byte header
// that claims 4 GiB, a container claiming 4 Gi elements, or a 1 MiB deep
// nesting (the largest znode) allocates no more than a small multiple of
// its own size. (msgpack/v5 alone would allocate up to ~5 MiB for such a
// header and recurse once per nesting level, ~130 MiB of stack for 1 MiB.)
func TestDecodeMetaHostile(t *testing.T) {
	const heapBound = 64 << 10
	decoders := map[string]func([]byte) error{
		"channel": func(b []byte) error { _, err := decodeChannelMeta(b); return err },
		"epoch":   func(b []byte) error { _, err := decodeEpochMeta(b); return err },
		"room":    func(b []byte) error { _, err := decodeRoomMeta(b); return err },
	}
	for name, input := range hostileInputs() {
		for dname, decode := range decoders {
			t.Run(fmt.Sprintf("%s/%s", dname, name), func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				start := time.Now()
				err := decode(input)
				elapsed := time.Since(start)
				runtime.ReadMemStats(&after)
				require.ErrorIs(t, err, ErrCorrupt)
				allocated := after.TotalAlloc - before.TotalAlloc
				require.Less(t, allocated, uint64(heapBound+16*len(input)),
					"decoding %d hostile bytes allocated %d bytes", len(input), allocated)
				require.Less(t, elapsed, 5*time.Second)
			})
		}
	}
}

// TestWriteMetaFuzzSeeds regenerates the seed corpora when
// LOGROOM_WRITE_SEEDS=1.
func TestWriteMetaFuzzSeeds(t *testing.T) {
	if os.Getenv("LOGROOM_WRITE_SEEDS") != "1" {
		t.Skip("set LOGROOM_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzDecode{Channel,Epoch,Room}Meta")
	}
	for target, seeds := range metaSeeds() {
		dir := filepath.Join("testdata", "fuzz", target)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for i, s := range seeds {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644))
		}
	}
}
