package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// tlsProposers are the proposer counts of the TLS rows (issue 29: appends
// at 16 and 256 proposers, TLS against plaintext).
var tlsProposers = []int{16, 256}

// runTLS compares plaintext and TLS to ZooKeeper on one ensemble of its
// own (-servers servers, started with Options.TLS: a plaintext and a TLS
// client port per server, both on Netty, the only connection factory that
// speaks TLS, so the two differ by TLS alone): raw creates (256 B, 64 in
// flight; batch-sized, 8 in flight) and Writer.Append rows for each
// -sizes entry size at 16 and 256 proposers. Plaintext and TLS rows
// alternate (append rows as plain, TLS, TLS, plain) and run in this
// process, after an unreported warm-up row of each mode; each row also
// records ZooKeeper's and the bench's CPU per entry. The
// TLS client presents a certificate (ssl.clientAuth=need) and the room
// has an x509 ACL, as a deployment would. Each mode's append rows'
// ratio_to_raw divides by that mode's best batch-sized raw row; the last
// row of each group of four carries tls_over_plain, the mean entries/s
// of its two TLS rows over that of its two plaintext rows.
func runTLS(ctx context.Context, b *bench) ([]Result, error) {
	b.prog.Logf("starting a TLS ZooKeeper ensemble (%d server(s))", b.cfg.servers)
	ens, err := zkensemble.Start(ctx, zkensemble.Options{Servers: b.cfg.servers, HeapMB: b.cfg.heapMB, Logger: b.log,
		TLS: &zkensemble.TLSOptions{}})
	if err != nil {
		return nil, fmt.Errorf("tls: start ZooKeeper: %w", err)
	}
	defer ens.Close()
	if err := b.warmEnsemble(ctx, ens); err != nil {
		return nil, fmt.Errorf("tls: warm up ZooKeeper: %w", err)
	}
	files, err := ens.TLSCA().Issue(filepath.Join(b.tmp, "tls"), "bench", testpki.Options{Client: true})
	if err != nil {
		return nil, err
	}
	src, err := tlsfiles.Load(files)
	if err != nil {
		return nil, err
	}
	id, err := src.Identity()
	if err != nil {
		return nil, err
	}
	var pids []int
	for i := range ens.Size() {
		pids = append(pids, ens.PID(i))
	}
	modes := []struct {
		name  string
		addrs []string
		tls   *tlsfiles.Source
	}{
		{"plain", ens.Addrs(), nil},
		{"tls", ens.SecureAddrs(), src},
	}
	sub := func(addrs []string) *bench {
		c := *b
		c.ens, c.addrs, c.pids = ens, addrs, pids
		return &c
	}

	var out []Result
	ceiling := map[string]float64{}
	rawRows := []struct{ size, inflight int }{{256, 64}, {logroom.DefaultMaxBatchBytes, 8}}
	for i, row := range rawRows {
		for _, m := range modes {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			r, err := tlsRawRow(ctx, sub(m.addrs), m.name, m.tls, i, row.size, row.inflight)
			if err != nil {
				return out, fmt.Errorf("raw %s: %w", m.name, err)
			}
			if row.size == logroom.DefaultMaxBatchBytes && r.MBPerS > ceiling[m.name] {
				ceiling[m.name] = r.MBPerS
			}
			b.emit(r)
			out = append(out, r)
		}
	}
	// Warm-up, not reported: the first append rows on fresh servers run
	// slower (JIT, heap) by more than the difference measured.
	for _, m := range modes {
		wb := sub(m.addrs)
		wb.cfg.duration = min(b.cfg.duration, 3*time.Second)
		if _, err := tlsAppendRow(ctx, wb, m.addrs, m.tls, id, appendSpec{scenario: "tls-warmup-" + m.name, size: 256, proposers: 64, perCall: 1}); err != nil {
			return out, fmt.Errorf("warm-up %s: %w", m.name, err)
		}
	}
	for _, size := range b.cfg.sizes {
		for _, p := range tlsProposers {
			// plain, tls, tls, plain: a drift of the machine's load over
			// the four rows weighs on both modes alike.
			rates := map[string][]float64{}
			for k, mi := range []int{0, 1, 1, 0} {
				m := modes[mi]
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				sb := sub(m.addrs)
				sb.rawCeilingMBps = ceiling[m.name]
				r, err := tlsAppendRow(ctx, sb, m.addrs, m.tls, id, appendSpec{scenario: "tls-append-" + m.name, size: size, proposers: p, perCall: 1})
				if err != nil {
					msg := fmt.Sprintf("tls-append-%s %s x%d: %v", m.name, fmtBytes(size), p, err)
					b.prog.Logf("!! %s", msg)
					b.rowErrors = append(b.rowErrors, msg)
					continue
				}
				r.setExtra("transport", m.name)
				r.setExtra("round", k/2+1)
				setCostPerEntry(&r)
				rates[m.name] = append(rates[m.name], r.EntriesPerS)
				if k == 3 && len(rates["plain"]) == 2 && len(rates["tls"]) == 2 {
					r.setExtra("tls_over_plain", round3((rates["tls"][0]+rates["tls"][1])/(rates["plain"][0]+rates["plain"][1])))
					r.Note = "tls_over_plain: mean entries/s of the two TLS rows over the two plaintext rows"
				}
				b.emit(r)
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// tlsAppendRow dials (over TLS with src, presenting it and putting id in
// the room's ACL; plaintext without) and runs one append row.
func tlsAppendRow(ctx context.Context, b *bench, addrs []string, src *tlsfiles.Source, id string, s appendSpec) (Result, error) {
	dc := logroom.DialConfig{Servers: addrs, SessionTimeout: b.cfg.sessionTimeout, Logger: b.log, AnyServer: b.cfg.anyServer}
	if src != nil {
		dc.TLS, dc.ACLIdentities = src, []string{id}
	}
	cl, err := logroom.Dial(ctx, dc)
	if err != nil {
		return Result{}, fmt.Errorf("dial: %w", err)
	}
	defer cl.Close()
	return b.appendRow(ctx, cl, s)
}

// setCostPerEntry records the CPU the row cost per entry, in
// microseconds of one core: ZooKeeper's and the bench's. Unlike entries/s
// it barely moves with other tenants' load.
func setCostPerEntry(r *Result) {
	if r.EntriesPerS <= 0 {
		return
	}
	for _, k := range []string{"zookeeper", "bench"} {
		if v, ok := r.Extra["cpu_"+k+"_pct"].(float64); ok {
			r.setExtra(k+"_cpu_us_per_entry", round3(v/100/r.EntriesPerS*1e6))
		}
	}
}

// tlsRawRow is one raw create row (see measureRaw) over plaintext or TLS,
// connected to the leader as roomlog's clients are.
func tlsRawRow(ctx context.Context, b *bench, mode string, src *tlsfiles.Source, i, size, inflight int) (Result, error) {
	addrs := b.addrs
	if !b.cfg.anyServer {
		leader, err := b.ens.Leader(ctx)
		if err != nil {
			return Result{}, err
		}
		addrs = addrs[leader : leader+1]
	}
	conn, err := dialRawTLS(ctx, addrs, 10*time.Second, src)
	if err != nil {
		return Result{}, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	base := fmt.Sprintf("/bench-tls-raw-%s", mode)
	parent := fmt.Sprintf("%s/r%d", base, i)
	plain := zkx.Plain(conn, zk.WorldACL(zk.PermAll))
	if err := zkx.EnsurePath(ctx, plain, parent); err != nil {
		return Result{}, err
	}
	defer func() { _ = deleteTree(conn, base) }()
	label := fmt.Sprintf("raw over %s %s, %d in flight", mode, fmtBytes(size), inflight)
	b.prog.Logf("%s: %v", label, b.cfg.duration)
	r, err := measureRaw(ctx, b, conn, parent, label, size, inflight)
	if err != nil {
		return Result{}, err
	}
	r.Scenario = "tls-raw-" + mode
	r.setExtra("transport", mode)
	setCostPerEntry(&r)
	return r, nil
}

// dialRawTLS is dialRaw over TLS when src is set: a go-zookeeper
// connection whose dialer runs the TLS handshake (verifying the server as
// 127.0.0.1) after the TCP connect.
func dialRawTLS(ctx context.Context, servers []string, timeout time.Duration, src *tlsfiles.Source) (*zk.Conn, error) {
	if src == nil {
		return dialRaw(ctx, servers, timeout)
	}
	return dialRawWith(ctx, servers, timeout, func(network, address string, t time.Duration) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(address)
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: t}, Config: src.ClientConfig(host)}
		return d.Dial(network, address)
	})
}
