package api

import (
	"bytes"
	"net/http"
)

// statusPage is the HTML status page; it reloads itself every PageRefresh.
const statusPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.RefreshSeconds}}">
<title>dfsmaster {{.S.ID}} · {{.S.Role}}{{if .S.Observer}} (observer){{end}} · room {{.S.Room}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.75em; text-align: right; }
th { background: #f4f4f4; }
td.l, th.l { text-align: left; }
.primary { font-weight: bold; color: #0a6b0a; }
.failure, .failed { color: #b00; font-weight: bold; }
.behind { color: #a60; font-weight: bold; }
.observer { color: #336; font-style: italic; }
</style>
</head>
<body>
<h1>dfsmaster <code>{{.S.ID}}</code> <span class="{{.S.Role}}">{{.S.Role}}</span>{{if .S.Observer}} <span class="observer">observer</span>{{end}}</h1>
{{if .S.Observer}}<p class="observer">This master is an observer: it applies the log, serves reads and checkpoints, and never becomes primary.</p>{{end}}
{{if .S.Error}}<p class="failure">failed: {{.S.Error}}</p>
<p>This master no longer takes part in the room: it applies nothing, accepts no commands and serves no reads
(<a href="/v1/health">/v1/health</a> answers 503). Its state stays as it was; an operator must find the cause before restarting it.</p>{{end}}
<table>
<tr><th class="l">room</th><td class="l">{{.S.Room}}</td></tr>
<tr><th class="l">room version</th><td class="l">{{.S.RoomVersion}}{{if .S.RoomVersionTarget}} (target {{.S.RoomVersionTarget}}{{if .S.RoomVersionBlocked}}, blocked: {{.S.RoomVersionBlocked}}{{end}}){{end}}</td></tr>
<tr><th class="l">binary</th><td class="l">{{.S.Version}} (commit {{.S.Commit}}), room versions {{.S.RoomVersionMin}}..{{.S.RoomVersionMax}}</td></tr>
<tr><th class="l">epoch</th><td>{{.S.Epoch}}</td></tr>
<tr><th class="l">applied index</th><td>{{.S.AppliedIndex}}</td></tr>
<tr><th class="l">committed index</th><td>{{.S.CommittedIndex}}</td></tr>
<tr><th class="l">lag</th><td>{{.S.Lag}}</td></tr>
<tr><th class="l">ZooKeeper session</th><td class="l">{{if .S.Connected}}connected{{else}}disconnected{{end}}</td></tr>
<tr><th class="l">room bytes in ZooKeeper</th><td>{{.S.RoomBytes}}</td></tr>
<tr><th class="l">newest local checkpoint</th><td>{{.S.CheckpointIndex}}</td></tr>
<tr><th class="l">bootstraps from a peer</th><td>{{.S.Bootstraps}}</td></tr>
<tr><th class="l">primary</th><td class="l">{{if .S.PrimaryAddr}}<a href="{{href .S.PrimaryAddr}}">{{.S.PrimaryID}} ({{.S.PrimaryAddr}})</a>{{else}}none known{{end}}</td></tr>
</table>
<h2>Members</h2>
<table>
<tr><th class="l">id</th><th class="l">address</th><th class="l">role</th><th>applied index</th><th>behind the primary (entries)</th><th class="l">room versions</th></tr>
{{range .S.Members}}<tr><td class="l">{{.ID}}</td><td class="l">{{if .Addr}}<a href="{{href .Addr}}">{{.Addr}}</a>{{end}}</td><td class="l {{.Role}}">{{.Role}}{{if .Observer}} <span class="observer">(observer)</span>{{end}}</td><td>{{.AppliedIndex}}</td><td{{if .Lag}} class="behind"{{end}}>{{.Lag}}</td><td class="l">{{.RoomVersionMin}}..{{.RoomVersionMax}}</td></tr>
{{else}}<tr><td colspan="6" class="l">none</td></tr>
{{end}}</table>
<h2>Role changes of this master</h2>
<table>
<tr><th class="l">time (UTC)</th><th class="l">role</th><th>epoch</th><th class="l">reason</th></tr>
{{range .S.RoleChanges}}<tr><td class="l">{{ts .At}}</td><td class="l {{.Role}}">{{.Role}}</td><td>{{.Epoch}}</td><td class="l">{{.Reason}}</td></tr>
{{else}}<tr><td colspan="4" class="l">none recorded</td></tr>
{{end}}</table>
<h2>Channels</h2>
<table>
<tr><th>channel</th><th>epoch</th><th>first index</th><th>last index</th><th class="l">state</th><th>batches</th><th>bytes</th></tr>
{{range .S.Channels}}<tr><td>{{.Num}}</td><td>{{.Epoch}}</td><td>{{.FirstIndex}}</td><td>{{if .Sealed}}{{.LastIndex}}{{else}}…{{end}}</td><td class="l">{{if .Sealed}}sealed{{else}}open{{end}}</td><td>{{.Batches}}</td><td>{{.Bytes}}</td></tr>
{{else}}<tr><td colspan="7" class="l">none</td></tr>
{{end}}</table>
<p>JSON: <a href="/v1/status">/v1/status</a>{{if .MetricsPath}} · Prometheus: <a href="{{.MetricsPath}}">{{.MetricsPath}}</a>{{end}} · <a href="/v1/health">/v1/health</a> · <a href="/v1/hash">/v1/hash</a> · <a href="/v1/ls?path=/">/v1/ls?path=/</a></p>
</body>
</html>
`

type pageData struct {
	S              Status
	RefreshSeconds int
	MetricsPath    string
}

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		s.fail(w, r, badRequest("the status page takes no query parameters"))
		return
	}
	refresh := int(s.cfg.PageRefresh.Seconds())
	if refresh < 1 {
		refresh = 1
	}
	var buf bytes.Buffer
	if err := s.page.Execute(&buf, pageData{S: s.m.Status(), RefreshSeconds: refresh, MetricsPath: s.cfg.MetricsPath}); err != nil {
		s.fail(w, r, &httpError{status: http.StatusInternalServerError, code: CodeInternal, msg: "status page: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}
