package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// keyed sends a request with the given Idempotency-Key header values (none:
// no header) through c.
func keyed(t *testing.T, c *http.Client, url, body string, keys ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for _, k := range keys {
		req.Header.Add(api.IdempotencyKeyHeader, k)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{status: resp.StatusCode, header: resp.Header, raw: raw}
}

func replayed(r reply) bool { return r.header.Get(api.IdempotentReplayedHeader) == "true" }

// blocks is the number of blocks of the file at path on base.
func blocks(t *testing.T, base, path string) int {
	t.Helper()
	return len(ok(t, get(t, base, "/v1/stat?path="+path))["block_list"].([]any))
}

// TestIdempotencyKey: a mutation retried with the same Idempotency-Key is
// applied once and answered with the original's status and body (marked
// Idempotent-Replayed), rejections included; the same key with another
// request is 422; a malformed key is 400; no key changes nothing.
func TestIdempotencyKey(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.primarySrv.URL
	ok(t, post(t, base, "/v1/mkdir", `{"path":"/a"}`))
	ok(t, post(t, base, "/v1/create", `{"path":"/a/f"}`))

	// The same key twice: the same answer, applied once.
	first := keyed(t, noRedirect, base+"/v1/addblock", `{"path":"/a/f","size":5}`, "op-1")
	require.Equal(t, map[string]any{"index": num(3), "block_id": num(1)}, ok(t, first))
	require.False(t, replayed(first))
	require.Empty(t, first.header.Values(api.IdempotentReplayedHeader))
	hash := ok(t, get(t, base, "/v1/hash"))
	second := keyed(t, noRedirect, base+"/v1/addblock", `{"path":"/a/f","size":5}`, "op-1")
	require.Equal(t, first.status, second.status)
	require.Equal(t, string(first.raw), string(second.raw))
	require.True(t, replayed(second))
	require.Equal(t, 1, blocks(t, base, "/a/f"))
	require.Equal(t, hash, ok(t, get(t, base, "/v1/hash")), "a replay changed the state")
	// The body is compared by the command it decodes to, not byte for byte.
	third := keyed(t, noRedirect, base+"/v1/addblock", `{ "size": 5, "path": "/a/f" }`, "op-1")
	require.Equal(t, string(first.raw), string(third.raw))
	require.True(t, replayed(third))

	// The same key with another body, or on another endpoint: 422, nothing applied.
	for _, tc := range []struct{ path, body string }{
		{"/v1/addblock", `{"path":"/a/f","size":6}`},
		{"/v1/mkdir", `{"path":"/b"}`},
	} {
		r := keyed(t, noRedirect, base+tc.path, tc.body, "op-1")
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "body %s", r.raw)
		require.Equal(t, api.CodeIdempotencyKeyReused, r.code(t))
		require.False(t, replayed(r))
		require.Equal(t, hash, ok(t, get(t, base, "/v1/hash")))
	}
	require.Equal(t, 1, blocks(t, base, "/a/f"))

	// A command the namespace rejected is replayed too: same 409, same index.
	rej := keyed(t, noRedirect, base+"/v1/mkdir", `{"path":"/a"}`, "op-2")
	require.Equal(t, http.StatusConflict, rej.status, "body %s", rej.raw)
	require.Equal(t, "already_exists", rej.code(t))
	require.Equal(t, num(4), rej.obj(t)["index"])
	again := keyed(t, noRedirect, base+"/v1/mkdir", `{"path":"/a"}`, "op-2")
	require.Equal(t, rej.status, again.status)
	require.Equal(t, string(rej.raw), string(again.raw))
	require.True(t, replayed(again))

	// Without a key nothing is deduplicated: two addblocks, two blocks.
	ok(t, post(t, base, "/v1/addblock", `{"path":"/a/f","size":5}`))
	ok(t, post(t, base, "/v1/addblock", `{"path":"/a/f","size":5}`))
	require.Equal(t, 3, blocks(t, base, "/a/f"))

	// Distinct keys are distinct requests.
	r := keyed(t, noRedirect, base+"/v1/addblock", `{"path":"/a/f","size":5}`, "op-3")
	require.Equal(t, map[string]any{"index": num(7), "block_id": num(4)}, ok(t, r))
	require.False(t, replayed(r))
	require.Equal(t, 4, blocks(t, base, "/a/f"))
}

// TestIdempotencyKeyLostAnswer: the proposal is applied but its answer is
// lost (503 outcome_unknown, 504 timeout); the retry with the same key gets
// the original's answer and nothing is applied twice.
func TestIdempotencyKeyLostAnswer(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.primarySrv.URL
	ok(t, post(t, base, "/v1/create", `{"path":"/f"}`))

	p.primary.set(func(f *fakeMaster) { f.loseAnswer = fmt.Errorf("append: %w", api.ErrOutcomeUnknown) })
	r := keyed(t, noRedirect, base+"/v1/addblock", `{"path":"/f","size":7}`, "lost-1")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
	require.Equal(t, api.CodeOutcomeUnknown, r.code(t))
	require.Contains(t, r.obj(t)["message"], "same Idempotency-Key")
	require.Equal(t, 1, blocks(t, base, "/f"), "the lost answer's proposal was applied")

	p.primary.set(func(f *fakeMaster) { f.loseAnswer = nil })
	r = keyed(t, noRedirect, base+"/v1/addblock", `{"path":"/f","size":7}`, "lost-1")
	require.Equal(t, map[string]any{"index": num(2), "block_id": num(1)}, ok(t, r))
	require.True(t, replayed(r))
	require.Equal(t, 1, blocks(t, base, "/f"))

	// Without a key the message still says to read first.
	p.primary.set(func(f *fakeMaster) { f.proposeErr = fmt.Errorf("append: %w", api.ErrOutcomeUnknown) })
	r = post(t, base, "/v1/mkdir", `{"path":"/x"}`)
	require.Equal(t, api.CodeOutcomeUnknown, r.code(t))
	require.Contains(t, r.obj(t)["message"], "read before retrying")
}

// TestIdempotencyKeyOnStandby: a standby that has applied the original
// answers a retry from its own request table; otherwise it redirects, and a
// client following the 307 re-sends the key.
func TestIdempotencyKeyOnStandby(t *testing.T) {
	p := newPair(t, api.Config{})
	first := keyed(t, http.DefaultClient, p.standbySrv.URL+"/v1/mkdir", `{"path":"/s"}`, "via-standby")
	require.Equal(t, map[string]any{"index": num(1)}, ok(t, first))
	require.False(t, replayed(first))
	// Not yet replicated: the standby redirects, the primary replays.
	r := keyed(t, noRedirect, p.standbySrv.URL+"/v1/mkdir", `{"path":"/s"}`, "via-standby")
	require.Equal(t, http.StatusTemporaryRedirect, r.status, "body %s", r.raw)
	r = keyed(t, http.DefaultClient, p.standbySrv.URL+"/v1/mkdir", `{"path":"/s"}`, "via-standby")
	require.Equal(t, string(first.raw), string(r.raw))
	require.True(t, replayed(r))

	// Replicated: the standby answers itself.
	p.standby.catchUp(t, p.primary)
	r = keyed(t, noRedirect, p.standbySrv.URL+"/v1/mkdir", `{"path":"/s"}`, "via-standby")
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)
	require.Equal(t, string(first.raw), string(r.raw))
	require.True(t, replayed(r))
	r = keyed(t, noRedirect, p.standbySrv.URL+"/v1/mkdir", `{"path":"/t"}`, "via-standby")
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "body %s", r.raw)
	require.Equal(t, []any{"s"}, names(ok(t, get(t, p.primarySrv.URL, "/v1/ls?path=/"))))
}

// TestIdempotencyKeyInvalid: a malformed key is 400 invalid_idempotency_key
// before anything else is looked at; nothing is applied.
func TestIdempotencyKeyInvalid(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.primarySrv.URL
	for _, tc := range []struct {
		name string
		keys []string
		body string
	}{
		{"empty", []string{""}, `{"path":"/x"}`},
		{"too long", []string{strings.Repeat("k", 256)}, `{"path":"/x"}`},
		{"non-ASCII", []string{"clé"}, `{"path":"/x"}`},
		{"tab", []string{"a\tb"}, `{"path":"/x"}`},
		{"twice", []string{"a", "b"}, `{"path":"/x"}`},
		{"twice the same", []string{"a", "a"}, `{"path":"/x"}`},
		{"with a bad body too", []string{""}, `{"path":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := keyed(t, noRedirect, base+"/v1/mkdir", tc.body, tc.keys...)
			require.Equal(t, http.StatusBadRequest, r.status, "body %s", r.raw)
			require.Equal(t, api.CodeInvalidIdempotencyKey, r.code(t))
			require.NotContains(t, r.obj(t), "index")
			require.Equal(t, num(0), ok(t, get(t, base, "/v1/hash"))["applied_index"])
		})
	}
	// The longest key, and every printable ASCII byte, are fine.
	ok(t, keyed(t, noRedirect, base+"/v1/mkdir", `{"path":"/x"}`, strings.Repeat("k", 255)))
	var printable []byte
	for b := byte('!'); b <= '~'; b++ {
		printable = append(printable, b)
	}
	ok(t, keyed(t, noRedirect, base+"/v1/mkdir", `{"path":"/y"}`, "a b"+string(printable)))
	// Reads ignore the header.
	req, err := http.NewRequest(http.MethodGet, base+"/v1/ls?path=/", nil)
	require.NoError(t, err)
	req.Header.Set(api.IdempotencyKeyHeader, "")
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestValidIdempotencyKey(t *testing.T) {
	require.NoError(t, api.ValidIdempotencyKey("0123456789abcdef0123456789abcdef"))
	require.Error(t, api.ValidIdempotencyKey(""))
	require.Error(t, api.ValidIdempotencyKey("\x7f"))
	require.NotEqual(t, api.RequestIDForKey("a"), api.RequestIDForKey("b"))
	require.Equal(t, api.RequestIDForKey("a"), api.RequestIDForKey("a"))
	b, _ := json.Marshal(api.ErrorBody{Error: api.CodeIdempotencyKeyReused, Message: "m"})
	require.Equal(t, `{"error":"idempotency_key_reused","message":"m"}`, string(b))
}
