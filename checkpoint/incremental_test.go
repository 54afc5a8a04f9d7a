package checkpoint

import (
	"net/http"
	"strings"
)

// tarOnly makes h look like a server from before the per-file endpoint:
// /files/ answers a plain 404 and no answer carries HeaderFiles, so Fetch
// uses the tar stream.
func tarOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, filesPath) {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(hideFilesHeader{w}, r)
	})
}

type hideFilesHeader struct{ http.ResponseWriter }

func (h hideFilesHeader) WriteHeader(code int) {
	h.Header().Del(HeaderFiles)
	h.ResponseWriter.WriteHeader(code)
}

func (h hideFilesHeader) Write(p []byte) (int, error) {
	h.Header().Del(HeaderFiles)
	return h.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the real writer.
func (h hideFilesHeader) Unwrap() http.ResponseWriter { return h.ResponseWriter }
