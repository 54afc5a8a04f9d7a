package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// noRedirect is a client that returns a 307 instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type reply struct {
	status int
	header http.Header
	raw    []byte
}

// obj decodes the reply as one JSON object, keeping numbers exact.
func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.raw))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "body %s", r.raw)
	return m
}

func (r reply) code(t *testing.T) string {
	t.Helper()
	m := r.obj(t)
	require.Contains(t, m, "message", "error body %s", r.raw)
	code, _ := m["error"].(string)
	return code
}

func do(t *testing.T, c *http.Client, method, url, body string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{status: resp.StatusCode, header: resp.Header, raw: raw}
}

func post(t *testing.T, base, path, body string) reply {
	t.Helper()
	return do(t, noRedirect, http.MethodPost, base+path, body)
}

func get(t *testing.T, base, pathAndQuery string) reply {
	t.Helper()
	return do(t, noRedirect, http.MethodGet, base+pathAndQuery, "")
}

// ok requires a 200 and returns the decoded object.
func ok(t *testing.T, r reply) map[string]any {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	return r.obj(t)
}

func num(v uint64) json.Number { return json.Number(fmt.Sprint(v)) }

func TestMutationsAndReads(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.primarySrv.URL

	require.Equal(t, map[string]any{"index": num(1)}, ok(t, post(t, base, "/v1/mkdir", `{"path":"/a/b","parents":true}`)))
	require.Equal(t, map[string]any{"index": num(2)}, ok(t, post(t, base, "/v1/create", `{"path":"/a/f","replication":2}`)))
	require.Equal(t, map[string]any{"index": num(3)}, ok(t, post(t, base, "/v1/create", `{"path":"/a/g"}`))) // replication defaults to 3
	require.Equal(t, map[string]any{"index": num(4), "block_id": num(1)}, ok(t, post(t, base, "/v1/addblock", `{"path":"/a/f","size":134217728}`)))
	require.Equal(t, map[string]any{"index": num(5), "block_id": num(2)}, ok(t, post(t, base, "/v1/addblock", `{"path":"/a/f","size":5}`)))
	require.Equal(t, map[string]any{"index": num(6)}, ok(t, post(t, base, "/v1/mkdir", `{"path":"/c"}`)))

	require.Equal(t, map[string]any{"index": num(6), "entries": []any{
		map[string]any{"name": "b", "type": "dir", "size": num(0), "replication": num(0), "blocks": num(0)},
		map[string]any{"name": "f", "type": "file", "size": num(134217733), "replication": num(2), "blocks": num(2)},
		map[string]any{"name": "g", "type": "file", "size": num(0), "replication": num(3), "blocks": num(0)},
	}}, ok(t, get(t, base, "/v1/ls?path=/a")))

	require.Equal(t, map[string]any{"index": num(6), "path": "/a/f", "type": "file", "size": num(134217733),
		"replication": num(2), "blocks": num(2), "block_list": []any{
			map[string]any{"id": num(1), "size": num(134217728)},
			map[string]any{"id": num(2), "size": num(5)},
		}}, ok(t, get(t, base, "/v1/stat?path=/a/f")))
	require.Equal(t, "dir", ok(t, get(t, base, "/v1/stat?path=/"))["type"])

	require.Equal(t, map[string]any{"index": num(7)}, ok(t, post(t, base, "/v1/rename", `{"src":"/a","dst":"/c/a2"}`)))
	require.Equal(t, []any{"b", "f", "g"}, names(ok(t, get(t, base, "/v1/ls?path=/c/a2"))))
	require.Equal(t, map[string]any{"index": num(8)}, ok(t, post(t, base, "/v1/delete", `{"path":"/c/a2/f"}`)))
	require.Equal(t, map[string]any{"index": num(9)}, ok(t, post(t, base, "/v1/delete", `{"path":"/c","recursive":true}`)))
	require.Equal(t, map[string]any{"index": num(9), "entries": []any{}}, ok(t, get(t, base, "/v1/ls?path=/")))

	h := ok(t, get(t, base, "/v1/hash"))
	require.Equal(t, num(9), h["applied_index"])
	require.Len(t, h["hash"], 64)
	require.Len(t, h, 2)
}

func names(ls map[string]any) []any {
	var out []any
	for _, e := range ls["entries"].([]any) {
		out = append(out, e.(map[string]any)["name"])
	}
	return out
}

// TestErrors covers every error code a client can cause: each gets its 4xx
// status and JSON body, and none changes the state; only rejections by the
// log itself use up an index.
func TestErrors(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.primarySrv.URL
	ok(t, post(t, base, "/v1/mkdir", `{"path":"/d/sub","parents":true}`))
	ok(t, post(t, base, "/v1/create", `{"path":"/f","replication":1}`))
	ok(t, post(t, base, "/v1/mkdir", `{"path":"/empty"}`))
	bigPath := `"/` + strings.Repeat("x", 70<<10) + `"`

	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
		logged                   bool // the request reached the log (and was rejected there)
	}{
		// Rejections by the namespace state.
		{"mkdir exists", "POST", "/v1/mkdir", `{"path":"/d"}`, 409, "already_exists", true},
		{"mkdir missing parent", "POST", "/v1/mkdir", `{"path":"/x/y"}`, 404, "not_found", true},
		{"mkdir under file", "POST", "/v1/mkdir", `{"path":"/f/x"}`, 409, "not_a_directory", true},
		{"create exists", "POST", "/v1/create", `{"path":"/f"}`, 409, "already_exists", true},
		{"addblock missing", "POST", "/v1/addblock", `{"path":"/nope","size":1}`, 404, "not_found", true},
		{"addblock dir", "POST", "/v1/addblock", `{"path":"/d","size":1}`, 409, "is_a_directory", true},
		{"rename dst exists", "POST", "/v1/rename", `{"src":"/f","dst":"/d/sub"}`, 409, "already_exists", true},
		{"rename into itself", "POST", "/v1/rename", `{"src":"/d","dst":"/d/sub/x"}`, 400, "invalid_path", true},
		{"delete not empty", "POST", "/v1/delete", `{"path":"/d"}`, 409, "not_empty", true},
		{"delete missing", "POST", "/v1/delete", `{"path":"/nope"}`, 404, "not_found", true},
		{"mkdir root", "POST", "/v1/mkdir", `{"path":"/"}`, 409, "already_exists", true},
		{"create root", "POST", "/v1/create", `{"path":"/"}`, 409, "already_exists", true},
		{"addblock root", "POST", "/v1/addblock", `{"path":"/","size":1}`, 409, "is_a_directory", true},
		{"rename onto root", "POST", "/v1/rename", `{"src":"/f","dst":"/"}`, 409, "already_exists", true},

		// Mistakes caught before the log.
		{"delete root", "POST", "/v1/delete", `{"path":"/","recursive":true}`, 400, "invalid_path", false},
		{"delete root, not recursive", "POST", "/v1/delete", `{"path":"/"}`, 400, "invalid_path", false},
		{"rename root", "POST", "/v1/rename", `{"src":"/","dst":"/x"}`, 400, "invalid_path", false},
		{"key in capitals", "POST", "/v1/mkdir", `{"PATH":"/x"}`, 400, "bad_request", false},
		{"key capitalised", "POST", "/v1/create", `{"Path":"/x","replication":1}`, 400, "bad_request", false},
		{"second key in capitals", "POST", "/v1/mkdir", `{"path":"/x","Parents":true}`, 400, "bad_request", false},
		{"rename key in capitals", "POST", "/v1/rename", `{"src":"/f","DST":"/g"}`, 400, "bad_request", false},
		{"duplicate key", "POST", "/v1/mkdir", `{"path":"/x","path":"/y"}`, 400, "bad_request", false},
		{"duplicate key, same value", "POST", "/v1/delete", `{"path":"/f","path":"/f"}`, 400, "bad_request", false},
		{"duplicate key by case", "POST", "/v1/rename", `{"src":"/f","dst":"/g","Dst":"/h"}`, 400, "bad_request", false},
		{"invalid UTF-8 in path", "POST", "/v1/mkdir", "{\"path\":\"/a\xffb\"}", 400, "invalid_path", false},
		{"invalid UTF-8 in dst", "POST", "/v1/rename", "{\"src\":\"/f\",\"dst\":\"/\xc3\"}", 400, "invalid_path", false},
		{"lone high surrogate", "POST", "/v1/mkdir", `{"path":"/a\ud800b"}`, 400, "invalid_path", false},
		{"lone low surrogate", "POST", "/v1/create", `{"path":"/a\udc00"}`, 400, "invalid_path", false},
		{"high surrogate then non-surrogate", "POST", "/v1/mkdir", `{"path":"/a\ud800\u0041"}`, 400, "invalid_path", false},
		{"newline in path", "POST", "/v1/mkdir", `{"path":"/a\nb"}`, 400, "invalid_path", false},
		{"escaped newline in src", "POST", "/v1/rename", `{"src":"/f\u000a","dst":"/g"}`, 400, "invalid_path", false},
		{"tab in dst", "POST", "/v1/rename", `{"src":"/f","dst":"/g\th"}`, 400, "invalid_path", false},
		{"ESC in path", "POST", "/v1/addblock", `{"path":"/f\u001b[31m","size":1}`, 400, "invalid_path", false},
		{"DEL in path", "POST", "/v1/delete", `{"path":"/f\u007f"}`, 400, "invalid_path", false},
		{"C1 control in path", "POST", "/v1/mkdir", `{"path":"/a\u0085b"}`, 400, "invalid_path", false},
		{"relative path", "POST", "/v1/mkdir", `{"path":"d"}`, 400, "invalid_path", false},
		{"unclean path", "POST", "/v1/create", `{"path":"/d/../f"}`, 400, "invalid_path", false},
		{"trailing slash", "POST", "/v1/delete", `{"path":"/d/"}`, 400, "invalid_path", false},
		{"missing path", "POST", "/v1/mkdir", `{"parents":true}`, 400, "invalid_path", false},
		{"NUL in path", "POST", "/v1/mkdir", `{"path":"/a\u0000b"}`, 400, "invalid_path", false},
		{"bad dst", "POST", "/v1/rename", `{"src":"/f","dst":"g"}`, 400, "invalid_path", false},
		{"malformed JSON", "POST", "/v1/mkdir", `{"path":`, 400, "bad_request", false},
		{"not JSON", "POST", "/v1/mkdir", `mkdir /x`, 400, "bad_request", false},
		{"empty body", "POST", "/v1/mkdir", ``, 400, "bad_request", false},
		{"null body", "POST", "/v1/mkdir", `null`, 400, "bad_request", false},
		{"array body", "POST", "/v1/mkdir", `[{"path":"/x"}]`, 400, "bad_request", false},
		{"unknown field", "POST", "/v1/mkdir", `{"path":"/x","mode":493}`, 400, "bad_request", false},
		{"field of another op", "POST", "/v1/mkdir", `{"path":"/x","recursive":true}`, 400, "bad_request", false},
		{"trailing data", "POST", "/v1/mkdir", `{"path":"/x"} {"path":"/y"}`, 400, "bad_request", false},
		{"trailing garbage", "POST", "/v1/mkdir", `{"path":"/x"}]`, 400, "bad_request", false},
		{"wrong type", "POST", "/v1/mkdir", `{"path":"/x","parents":"yes"}`, 400, "bad_request", false},
		{"negative size", "POST", "/v1/addblock", `{"path":"/f","size":-1}`, 400, "bad_request", false},
		{"fractional size", "POST", "/v1/addblock", `{"path":"/f","size":1.5}`, 400, "bad_request", false},
		{"size too big", "POST", "/v1/addblock", `{"path":"/f","size":99999999999999999999}`, 400, "bad_request", false},
		{"size over block limit", "POST", "/v1/addblock", `{"path":"/f","size":1099511627777}`, 400, "bad_request", false},
		{"missing size", "POST", "/v1/addblock", `{"path":"/f"}`, 400, "bad_request", false},
		{"replication 0", "POST", "/v1/create", `{"path":"/g","replication":0}`, 400, "bad_request", false},
		{"negative replication", "POST", "/v1/create", `{"path":"/g","replication":-3}`, 400, "bad_request", false},
		{"replication too high", "POST", "/v1/create", `{"path":"/g","replication":513}`, 400, "bad_request", false},
		{"body too large", "POST", "/v1/mkdir", `{"path":` + bigPath + `}`, 413, "bad_request", false},
		{"query on mutation", "POST", "/v1/mkdir?path=/x", `{"path":"/x"}`, 400, "bad_request", false},
		{"unknown endpoint", "POST", "/v1/chmod", `{"path":"/x"}`, 404, "bad_request", false},
		{"unknown endpoint GET", "GET", "/v2/ls?path=/", ``, 404, "bad_request", false},
		{"GET on mutation", "GET", "/v1/mkdir", ``, 405, "bad_request", false},
		{"POST on read", "POST", "/v1/ls?path=/", `{}`, 405, "bad_request", false},
		{"DELETE", "DELETE", "/v1/delete", ``, 405, "bad_request", false},

		// Reads.
		{"ls missing", "GET", "/v1/ls?path=/nope", ``, 404, "not_found", false},
		{"ls through file", "GET", "/v1/ls?path=/f/x", ``, 409, "not_a_directory", false},
		{"ls no path", "GET", "/v1/ls", ``, 400, "invalid_path", false},
		{"ls bad path", "GET", "/v1/ls?path=d", ``, 400, "invalid_path", false},
		{"stat missing", "GET", "/v1/stat?path=/d/nope", ``, 404, "not_found", false},
		{"stat bad path", "GET", "/v1/stat?path=/d/./x", ``, 400, "invalid_path", false},
		{"ls newline in path", "GET", "/v1/ls?path=/d%0Asub", ``, 400, "invalid_path", false},
		{"stat control character in path", "GET", "/v1/stat?path=/f%1B", ``, 400, "invalid_path", false},
		{"stat invalid UTF-8 in path", "GET", "/v1/stat?path=/f%FF", ``, 400, "invalid_path", false},
		{"unknown query parameter", "GET", "/v1/ls?path=/&recursive=1", ``, 400, "bad_request", false},
		{"duplicate query parameter", "GET", "/v1/ls?path=/&path=/d", ``, 400, "bad_request", false},
		{"malformed query", "GET", "/v1/ls?path=%zz", ``, 400, "bad_request", false},
		{"bad min_index", "GET", "/v1/stat?path=/&min_index=-1", ``, 400, "bad_request", false},
		{"empty min_index", "GET", "/v1/hash?min_index=", ``, 400, "bad_request", false},
		{"min_index on status", "GET", "/v1/status?min_index=1", ``, 400, "bad_request", false},
		{"query on page", "GET", "/?x=1", ``, 400, "bad_request", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ok(t, get(t, base, "/v1/hash"))
			r := do(t, noRedirect, tc.method, base+tc.path, tc.body)
			require.Equal(t, tc.status, r.status, "body %s", r.raw)
			require.Equal(t, tc.code, r.code(t))
			require.NotEmpty(t, r.obj(t)["message"])
			after := ok(t, get(t, base, "/v1/hash"))
			require.Equal(t, before["hash"], after["hash"], "a failed request changed the state")
			if tc.logged {
				require.Equal(t, json.Number(after["applied_index"].(json.Number)), r.obj(t)["index"])
			} else {
				require.Equal(t, before["applied_index"], after["applied_index"], "a request rejected before the log used an index")
				require.NotContains(t, r.obj(t), "index")
			}
			if tc.status == 405 {
				require.NotEmpty(t, r.header.Get("Allow"))
			}
		})
	}
}

func TestStandbyRedirectsMutations(t *testing.T) {
	p := newPair(t, api.Config{})
	for path, body := range map[string]string{
		"/v1/mkdir":    `{"path":"/x"}`,
		"/v1/create":   `{"path":"/x"}`,
		"/v1/addblock": `{"path":"/x","size":1}`,
		"/v1/rename":   `{"src":"/x","dst":"/y"}`,
		"/v1/delete":   `{"path":"/x"}`,
	} {
		r := post(t, p.standbySrv.URL, path, body)
		require.Equal(t, http.StatusTemporaryRedirect, r.status, "body %s", r.raw)
		require.Equal(t, p.primarySrv.URL+path, r.header.Get("Location"))
		require.Equal(t, "not_primary", r.code(t))
		require.Equal(t, hostPort(p.primarySrv), r.obj(t)["primary"])
	}
	// Client mistakes are answered by the standby itself.
	r := post(t, p.standbySrv.URL, "/v1/mkdir", `{"path":"x"}`)
	require.Equal(t, http.StatusBadRequest, r.status)

	// A client that follows redirects re-sends the body to the primary.
	r = do(t, http.DefaultClient, http.MethodPost, p.standbySrv.URL+"/v1/mkdir", `{"path":"/via-standby"}`)
	require.Equal(t, map[string]any{"index": num(1)}, ok(t, r))
	require.Equal(t, []any{"via-standby"}, names(ok(t, get(t, p.primarySrv.URL, "/v1/ls?path=/"))))
	require.Equal(t, []any(nil), names(ok(t, get(t, p.standbySrv.URL, "/v1/ls?path=/"))))

	// Reads are served locally by the standby.
	p.standby.catchUp(t, p.primary)
	require.Equal(t, []any{"via-standby"}, names(ok(t, get(t, p.standbySrv.URL, "/v1/ls?path=/"))))

	// A primary given as a base URL is used as is.
	p.standby.set(func(f *fakeMaster) { f.status.PrimaryAddr = p.primarySrv.URL + "/" })
	r = post(t, p.standbySrv.URL, "/v1/delete", `{"path":"/via-standby"}`)
	require.Equal(t, http.StatusTemporaryRedirect, r.status)
	require.Equal(t, p.primarySrv.URL+"/v1/delete", r.header.Get("Location"))
}

func TestNoPrimary(t *testing.T) {
	p := newPair(t, api.Config{})
	for name, addr := range map[string]string{"none known": "", "itself": hostPort(p.standbySrv)} {
		t.Run(name, func(t *testing.T) {
			p.standby.set(func(f *fakeMaster) { f.status.PrimaryID, f.status.PrimaryAddr = "", addr })
			r := post(t, p.standbySrv.URL, "/v1/mkdir", `{"path":"/x"}`)
			require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
			require.Equal(t, "no_primary", r.code(t))
			require.Empty(t, r.header.Get("Location"))
		})
	}
}

func TestProposeErrors(t *testing.T) {
	p := newPair(t, api.Config{ProposeTimeout: 100 * time.Millisecond})
	base := p.primarySrv.URL
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("append: %w", api.ErrOutcomeUnknown), 503, "outcome_unknown"},
		{fmt.Errorf("queue: %w", api.ErrOverloaded), 503, "overloaded"},
		{fmt.Errorf("closed: %w", api.ErrUnavailable), 503, "unavailable"},
		{fmt.Errorf("replica: %w: applier broke", api.ErrFailed), 503, "failed"},
		{fmt.Errorf("election: %w", api.ErrNotPrimary), 503, "no_primary"},
		{context.DeadlineExceeded, 504, "timeout"},
		{context.Canceled, 503, "outcome_unknown"},
		{errors.New("disk on fire"), 500, "internal"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			p.primary.set(func(f *fakeMaster) { f.proposeErr = tc.err })
			r := post(t, base, "/v1/mkdir", `{"path":"/x"}`)
			require.Equal(t, tc.status, r.status, "body %s", r.raw)
			require.Equal(t, tc.code, r.code(t))
			if tc.code == "overloaded" {
				require.Equal(t, "1", r.header.Get("Retry-After"))
			}
		})
	}
	// A proposal that does not finish within ProposeTimeout.
	p.primary.set(func(f *fakeMaster) { f.proposeErr, f.blockUntil = nil, true })
	start := time.Now()
	r := post(t, base, "/v1/mkdir", `{"path":"/x"}`)
	require.Equal(t, http.StatusGatewayTimeout, r.status, "body %s", r.raw)
	require.Equal(t, "timeout", r.code(t))
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestMinIndex: a read on a standby with min_index waits until that index
// is applied (read-your-writes), and gives up with 504 after ReadWait.
func TestMinIndex(t *testing.T) {
	p := newPair(t, api.Config{ReadWait: 300 * time.Millisecond})
	w := ok(t, post(t, p.primarySrv.URL, "/v1/mkdir", `{"path":"/rw"}`))
	index := w["index"].(json.Number)

	// Not replicated: the standby times out.
	start := time.Now()
	r := get(t, p.standbySrv.URL, "/v1/ls?path=/rw&min_index="+index.String())
	require.Equal(t, http.StatusGatewayTimeout, r.status, "body %s", r.raw)
	require.Equal(t, "timeout", r.code(t))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	for _, q := range []string{"/v1/stat?path=/rw&min_index=", "/v1/hash?min_index="} {
		r = get(t, p.standbySrv.URL, q+index.String())
		require.Equal(t, http.StatusGatewayTimeout, r.status, "%s: body %s", q, r.raw)
	}

	// Replicated while the read waits: the read returns the write.
	p2 := newPair(t, api.Config{ReadWait: 30 * time.Second})
	ok(t, post(t, p2.primarySrv.URL, "/v1/mkdir", `{"path":"/rw"}`))
	w = ok(t, post(t, p2.primarySrv.URL, "/v1/create", `{"path":"/rw/f"}`))
	index = w["index"].(json.Number)
	var wg sync.WaitGroup
	var waited reply
	wg.Add(1)
	go func() {
		defer wg.Done()
		waited = do(t, noRedirect, http.MethodGet, p2.standbySrv.URL+"/v1/stat?path=/rw/f&min_index="+index.String(), "")
	}()
	// Replicate only once the read is waiting.
	require.Eventually(t, func() bool { return p2.standby.waiting() > 0 }, 10*time.Second, time.Millisecond)
	p2.standby.catchUp(t, p2.primary)
	wg.Wait()
	got := ok(t, waited)
	require.Equal(t, index, got["index"])
	require.Equal(t, "file", got["type"])

	// Already applied: no wait at all, and the index reported is the view's.
	got = ok(t, get(t, p2.standbySrv.URL, "/v1/ls?path=/rw&min_index=1"))
	require.Equal(t, index, got["index"])
	got = ok(t, get(t, p2.standbySrv.URL, "/v1/hash?min_index=0"))
	require.Equal(t, index, got["applied_index"])
}

func TestHashesConverge(t *testing.T) {
	p := newPair(t, api.Config{})
	for i := 0; i < 20; i++ {
		ok(t, post(t, p.primarySrv.URL, "/v1/mkdir", fmt.Sprintf(`{"path":"/d%d/e","parents":true}`, i%7)))
		post(t, p.primarySrv.URL, "/v1/create", fmt.Sprintf(`{"path":"/d%d/f"}`, i%5))
		post(t, p.primarySrv.URL, "/v1/addblock", fmt.Sprintf(`{"path":"/d%d/f","size":%d}`, i%5, i))
	}
	post(t, p.primarySrv.URL, "/v1/rename", `{"src":"/d1","dst":"/d2/moved"}`)
	post(t, p.primarySrv.URL, "/v1/delete", `{"path":"/d3","recursive":true}`)
	ph := ok(t, get(t, p.primarySrv.URL, "/v1/hash"))
	p.standby.catchUp(t, p.primary)
	sh := ok(t, get(t, p.standbySrv.URL, "/v1/hash?min_index="+ph["applied_index"].(json.Number).String()))
	require.Equal(t, ph, sh)
}

func TestStatusAndPage(t *testing.T) {
	p := newPair(t, api.Config{PageRefresh: 3 * time.Second})
	ok(t, post(t, p.primarySrv.URL, "/v1/mkdir", `{"path":"/x"}`))
	st := ok(t, get(t, p.primarySrv.URL, "/v1/status"))
	require.Equal(t, "m1", st["id"])
	require.Equal(t, "primary", st["role"])
	require.Equal(t, num(1), st["applied_index"])
	require.Equal(t, num(1), st["epoch"])
	require.Equal(t, hostPort(p.primarySrv), st["primary_addr"])
	require.Len(t, st["members"], 2)
	require.Len(t, st["channels"], 1)

	st = ok(t, get(t, p.standbySrv.URL, "/v1/status"))
	require.Equal(t, "standby", st["role"])
	require.Equal(t, num(0), st["applied_index"])

	r := get(t, p.primarySrv.URL, "/")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "text/html; charset=utf-8", r.header.Get("Content-Type"))
	page := string(r.raw)
	for _, want := range []string{`http-equiv="refresh" content="3"`, "m1", "m2", "primary", "standby",
		`href="` + p.primarySrv.URL + `/"`, `href="` + p.standbySrv.URL + `/"`, "open", "1234"} {
		require.Contains(t, page, want)
	}
	p.primary.set(func(f *fakeMaster) { f.status.Error = "applier failed: <boom>" })
	page = string(get(t, p.primarySrv.URL, "/").raw)
	require.Contains(t, page, "applier failed: &lt;boom&gt;")

	r = do(t, noRedirect, http.MethodHead, p.primarySrv.URL+"/v1/status", "")
	require.Equal(t, http.StatusOK, r.status)
}

func TestConfigValidate(t *testing.T) {
	_, err := api.New(api.Config{})
	require.ErrorIs(t, err, api.ErrInvalidConfig)
	err = api.Config{ReadWait: -1, ProposeTimeout: -1, MaxBodyBytes: 100, PageRefresh: -1}.Validate()
	require.ErrorIs(t, err, api.ErrInvalidConfig)
	for _, field := range []string{"Master", "ReadWait", "ProposeTimeout", "MaxBodyBytes", "PageRefresh"} {
		require.ErrorContains(t, err, field)
	}
	require.NoError(t, api.Config{Master: newFakeMaster(t, "m", api.RolePrimary)}.Validate())
}

// TestFailedMaster: a master whose replica failed keeps answering
// /v1/status (200, with the reason) and the page; /v1/health, mutations and
// reads answer 503 "failed" with the reason, and a mutation is never sent
// to a primary the failed master still names.
func TestFailedMaster(t *testing.T) {
	p := newPair(t, api.Config{})
	ok(t, post(t, p.primarySrv.URL, "/v1/mkdir", `{"path":"/x"}`))
	p.standby.catchUp(t, p.primary)
	base := p.standbySrv.URL

	// Healthy: 200 with the role.
	h := ok(t, get(t, base, "/v1/health"))
	require.Equal(t, map[string]any{"status": "ok", "id": "m2", "role": "standby", "applied_index": num(1)}, h)
	r := do(t, noRedirect, http.MethodHead, base+"/v1/health", "")
	require.Equal(t, http.StatusOK, r.status)

	const reason = "replica: diverged: batch 7 of ch-0000000002 is <not> ours"
	p.standby.set(func(f *fakeMaster) { f.status.Role, f.status.Error = api.RoleFailed, reason })

	st := ok(t, get(t, base, "/v1/status"))
	require.Equal(t, "failed", st["role"])
	require.Equal(t, reason, st["failure"])
	page := get(t, base, "/")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, string(page.raw), "failed: replica: diverged: batch 7 of ch-0000000002 is &lt;not&gt; ours")

	failed := func(r reply) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
		require.Equal(t, api.CodeFailed, r.code(t))
		require.Contains(t, r.obj(t)["message"], reason)
		require.Empty(t, r.header.Get("Location"))
	}
	failed(get(t, base, "/v1/health"))
	r = do(t, noRedirect, http.MethodHead, base+"/v1/health", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	for path, body := range map[string]string{
		"/v1/mkdir":    `{"path":"/y"}`,
		"/v1/create":   `{"path":"/y"}`,
		"/v1/addblock": `{"path":"/x","size":1}`,
		"/v1/rename":   `{"src":"/x","dst":"/y"}`,
		"/v1/delete":   `{"path":"/x"}`,
	} {
		failed(post(t, base, path, body)) // not a 307 to the primary it names
	}
	for _, q := range []string{"/v1/ls?path=/", "/v1/stat?path=/x", "/v1/hash", "/v1/ls?path=/&min_index=1000"} {
		failed(get(t, base, q))
	}
	// A client mistake is still a client mistake.
	require.Equal(t, http.StatusBadRequest, post(t, base, "/v1/mkdir", `{"path":"y"}`).status)

	// Propose itself reporting the failure (the master failed meanwhile).
	p.primary.set(func(f *fakeMaster) { f.proposeErr = fmt.Errorf("%w: %s", api.ErrFailed, reason) })
	failed(post(t, p.primarySrv.URL, "/v1/mkdir", `{"path":"/z"}`))

	// Closed (shutting down): 503 unavailable.
	p.standby.set(func(f *fakeMaster) { f.status.Role, f.status.Error = api.RoleClosed, "" })
	r = get(t, base, "/v1/health")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
	require.Equal(t, api.CodeUnavailable, r.code(t))
	require.Equal(t, "closed", ok(t, get(t, base, "/v1/status"))["role"])
}

// TestHealthBehindWithoutSource: a standby that cannot reach its room's
// state (started empty after a restore, with no checkpoint to fetch: its
// tail retries with an error) must not say healthy; before, /v1/health
// answered 200 while it sat at index 0 and reads of existing paths
// answered 404.
func TestHealthBehindWithoutSource(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.standbySrv.URL
	ok(t, get(t, base, "/v1/health"))

	const why = "replica: bootstrap: no member serves a checkpoint at or past index 90"
	p.standby.set(func(f *fakeMaster) { f.status.TailError = why })
	r := get(t, base, "/v1/health")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
	require.Equal(t, api.CodeBehind, r.code(t))
	require.Contains(t, r.obj(t)["message"], why)
	require.Equal(t, why, ok(t, get(t, base, "/v1/status"))["tail_error"])

	p.standby.set(func(f *fakeMaster) { f.status.TailError = "" })
	ok(t, get(t, base, "/v1/health"))
}

// TestReadsBehindWithoutSource: reads on a standby that cannot reach its
// room's state (its tail retries with an error, /v1/health says behind)
// answer 503 behind with the reason, not what its store holds: before,
// a standby started empty after a restore answered 404 for paths that
// exist in the room. Once the tail progresses again, reads are served.
func TestReadsBehindWithoutSource(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.standbySrv.URL
	ok(t, post(t, p.primarySrv.URL, "/v1/mkdir", `{"path":"/d"}`))

	const why = "replica: bootstrap: no member serves a checkpoint at or past index 90"
	p.standby.set(func(f *fakeMaster) { f.status.TailError = why })
	for _, q := range []string{"/v1/ls?path=/", "/v1/stat?path=/d", "/v1/hash", "/v1/placements", "/v1/stat?path=/d&min_index=1"} {
		r := get(t, base, q)
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: body %s", q, r.raw)
		require.Equal(t, api.CodeBehind, r.code(t), q)
		require.Contains(t, r.obj(t)["message"], why, q)
		require.Contains(t, r.obj(t)["message"], "cannot reach its room's state", q)
		require.Equal(t, "1", r.header.Get("Retry-After"), q)
	}

	p.standby.set(func(f *fakeMaster) { f.status.TailError = "" })
	p.standby.catchUp(t, p.primary)
	ok(t, get(t, base, "/v1/stat?path=/d"))
}
