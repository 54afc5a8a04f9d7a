package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// pair --tls: certificates made in the work dir, HTTPS with mutual TLS
// between every process that speaks HTTP.

// makeCerts makes a CA and certificates for the masters (client and
// server, for 127.0.0.1 and localhost), one for each chunk server (cs1,
// cs2, ...: each its own identity, for the per-worker ACLs) and the
// demo's own client in <work dir>/tls, and switches the demo's HTTP
// client to HTTPS with its certificate.
func (p *pair) makeCerts() error {
	dir := filepath.Join(p.tmp, "tls")
	ca, err := testpki.NewCA("dfsmaster-pair-ca")
	if err != nil {
		return fmt.Errorf("make the CA: %w", err)
	}
	p.ca = ca
	p.tls = map[string]tlsfiles.Files{}
	p.idents = map[string]string{}
	p.zkWorkerIdents = map[string]string{}
	ids := []string{"m1", "m2", "client", "ops"}
	for i := 1; i <= p.cfg.chunkServers; i++ {
		ids = append(ids, chunkID(i))
	}
	for _, id := range ids {
		o := testpki.Options{}
		if id != "m1" && id != "m2" {
			o.Client = true
		}
		f, err := ca.Issue(dir, id, o)
		if err != nil {
			return fmt.Errorf("certificate of %s: %w", id, err)
		}
		p.tls[id] = f
		src, err := tlsfiles.Load(f)
		if err != nil {
			return err
		}
		ident, err := src.Identity()
		if err != nil {
			return err
		}
		p.idents[id] = ident
		switch {
		case id == "m1" || id == "m2" || id == "ops": // the room: the masters and the operator (the demo's own ZooKeeper client)
			p.zkACL = append(p.zkACL, ident)
		case strings.HasPrefix(id, "cs"): // its own task directory only
			p.zkWorkers = append(p.zkWorkers, id)
			p.zkWorkerIdents[id] = ident
		}
		switch id {
		case "client":
			p.clientTLS = src
		case "ops":
			p.opsTLS = src
		}
	}
	tr := client.HTTPSTransport(p.clientTLS)
	tr.MaxIdleConnsPerHost = 64
	p.eps.hc.Transport = tr
	cs := "no chunk servers"
	if len(p.zkWorkers) > 0 {
		cs = "each chunk server (" + strings.Join(p.zkWorkers, ", ") + ")"
	}
	p.step("TLS: a CA and certificates for m1, m2, %s and the demo's client in %s: the masters serve HTTPS only and require a client certificate the CA signed", cs, dir)
	return nil
}

// checkTLS checks from outside that m1 serves nothing in clear and
// refuses an HTTPS client without a certificate, while the demo's client
// (with one) is answered.
func (p *pair) checkTLS(ctx context.Context) error {
	if p.zkTLS {
		if err := p.checkZKTLS(ctx); err != nil {
			return err
		}
	}
	base := p.addr("m1")
	hostport := strings.TrimPrefix(base, "https://")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	get := func(hc *http.Client, url string) (*http.Response, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp, string(b), nil
	}
	// Plain HTTP: Go's server answers 400 without serving anything.
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, body, err := get(plain, "http://"+hostport+"/v1/status")
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		return fmt.Errorf("TLS check: a plain HTTP request to %s got %v %v, want 400 (nothing served in clear)", hostport, resp, err)
	}
	if strings.Contains(body, "role") {
		return fmt.Errorf("TLS check: a plain HTTP request to %s was served: %q", hostport, body)
	}
	// HTTPS trusting the CA, without a client certificate: refused.
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(p.tls["m1"].CA)
	if err != nil {
		return err
	}
	pool.AppendCertsFromPEM(ca)
	noCert := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	_, _, err = get(noCert, base+"/v1/status")
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		return fmt.Errorf("TLS check: an HTTPS client without a certificate got %v, want the handshake refused (certificate required)", err)
	}
	if ctx.Err() != nil {
		return errors.New("TLS check: timed out")
	}
	p.step("TLS check: m1 answers a plain HTTP request with 400 (nothing in clear) and refuses an HTTPS client without a certificate (%v)", shortErr(err))
	return nil
}

// shortErr is the last part of an error chain's text.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && i+2 < len(s) {
		return s[i+2:]
	}
	return s
}

// zkTLSArgs are the --zk-tls-* and --zk-acl-x509* flags of process id
// ("m1", "m2", "cs1", ...) when ZooKeeper is TLS: its own certificate
// and the ACLs by role. The room's znodes and the task directory grant
// the masters and the operator (zkACL) only (--zk-acl-x509); a master
// maps each chunk server to its identity (--zk-acl-x509-worker
// csN=SUBJECT), so the assigner grants each chunk server its own task
// directory only (recipe/tasks per-worker ACLs); a chunk server creates
// its znodes (membership, reports) for the masters and itself. The
// masters accept only each other as peers (--tls-peer).
func (p *pair) zkTLSArgs(id string) []string {
	if !p.zkTLS {
		return nil
	}
	f := p.tls[id]
	args := []string{"--zk-tls-ca", f.CA, "--zk-tls-cert", f.Cert, "--zk-tls-key", f.Key}
	for _, ident := range p.zkACL {
		args = append(args, "--zk-acl-x509", ident)
	}
	if _, ok := p.zkWorkerIdents[id]; ok {
		return append(args, "--zk-acl-x509", "self")
	}
	for _, w := range p.zkWorkers {
		args = append(args, "--zk-acl-x509-worker", w+"="+p.zkWorkerIdents[w])
	}
	return args
}

// peerArgs are the --tls-peer flags of a master: the masters' identities.
func (p *pair) peerArgs() []string {
	var args []string
	for _, id := range []string{"m1", "m2"} {
		if ident, ok := p.idents[id]; ok {
			args = append(args, "--tls-peer", ident)
		}
	}
	return args
}

// zkDial adds the demo's own ZooKeeper TLS (the operator's certificate,
// the room's ACL identities) to d when ZooKeeper is TLS.
func (p *pair) zkDial(d logroom.DialConfig) logroom.DialConfig {
	if p.zkTLS {
		d.TLS, d.ACLIdentities = p.opsTLS, p.zkACL
	}
	return d
}

// plainZK is ZooKeeper's plain address list (its TLS one when it has no
// other).
func (p *pair) plainZK() string {
	if p.zkPlain != "" {
		return p.zkPlain
	}
	return p.zkConn
}

// checkZKTLS checks that ZooKeeper refuses what the room's ACL does not
// name: a client with a certificate of the pair's CA but another identity
// is authenticated (TLS) and still gets NoAuth on the room; a client
// without TLS on the plain port gets NoAuth as well; so does the first
// chunk server's certificate (the chunk servers are granted the task
// znodes, not the room). Each of them is refused reading the room and
// each step of acting as a master: taking over (setting the room's epoch
// znode, under the name the room meta records, and creating a writer
// token under it), standing for election (a candidate under the room's
// election node) and appending (a batch in the newest channel).
func (p *pair) checkZKTLS(ctx context.Context) error {
	dir := filepath.Join(p.tmp, "tls")
	f, err := p.ca.Issue(dir, "intruder", testpki.Options{Client: true})
	if err != nil {
		return err
	}
	intruder, err := tlsfiles.Load(f)
	if err != nil {
		return err
	}
	zn, err := p.roomZnodes(ctx)
	if err != nil {
		return fmt.Errorf("ZooKeeper TLS check: %w", err)
	}
	type client struct {
		what string
		cfg  logroom.DialConfig
	}
	clients := []client{
		{"a TLS client of the same CA with another identity", logroom.DialConfig{Servers: logroom.SplitServers(p.zkConn), TLS: intruder}},
		{"a plain client", logroom.DialConfig{Servers: logroom.SplitServers(p.zkPlain)}},
	}
	who := "a client with another identity (CN=intruder) and a plain client are"
	if len(p.zkWorkers) > 0 {
		cs := p.zkWorkers[0]
		chunk, err := tlsfiles.Load(p.tls[cs])
		if err != nil {
			return err
		}
		clients = append(clients, client{"chunk server " + cs + "'s certificate", logroom.DialConfig{Servers: logroom.SplitServers(p.zkConn), TLS: chunk}})
		who = fmt.Sprintf("a client with another identity (CN=intruder), a plain client and chunk server %s's certificate (%s) are", cs, p.zkWorkerIdents[cs])
	}
	for _, d := range clients {
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		c, err := logroom.Dial(dctx, d.cfg)
		cancel()
		if err != nil {
			return fmt.Errorf("ZooKeeper TLS check: %s: connect: %w", d.what, err)
		}
		_, _, err = c.Conn().Get(zn.room)
		if !errors.Is(err, zk.ErrNoAuth) {
			c.Close()
			return fmt.Errorf("ZooKeeper TLS check: %s reading %s got %v, want %v", d.what, zn.room, err, zk.ErrNoAuth)
		}
		err = zn.tryMasterWrites(c.Conn())
		c.Close()
		if err != nil {
			return fmt.Errorf("ZooKeeper TLS check: %s %w", d.what, err)
		}
	}
	p.step("ZooKeeper TLS check: %s refused reading and writing %s (%v): taking over (%s and a writer token under it), standing for election (a candidate in %s) and appending (%s)",
		who, zn.room, zk.ErrNoAuth, zn.epoch, zn.election, zn.batch)
	return nil
}

// roomZnodes are the znodes of the pair's room that only a master may
// write, as the operator's client reads them.
type roomZnodes struct {
	room     string // the room znode
	epoch    string // its epoch znode, under the name the room meta records
	election string // the election node (candidates)
	batch    string // the batch znode the next append would create in the newest channel
}

// roomZnodes reads the room's znodes with the operator's certificate:
// the epoch znode's name from the room meta (a re-seeded room's is
// epoch-<16 hex>, not epoch), and the name of the next batch in the
// newest channel.
func (p *pair) roomZnodes(ctx context.Context) (roomZnodes, error) {
	var auth *logroom.Digest
	if p.digestFile != "" {
		d, err := logroom.LoadDigestFile(p.digestFile)
		if err != nil {
			return roomZnodes{}, err
		}
		auth = d
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := logroom.Dial(ctx, p.zkDial(logroom.DialConfig{Servers: logroom.SplitServers(p.zkConn), Auth: auth}))
	if err != nil {
		return roomZnodes{}, fmt.Errorf("the operator's client: %w", err)
	}
	defer c.Close()
	info, err := logroom.ReadRoomInfo(ctx, c, replica.DefaultBase, p.cfg.room)
	if err != nil {
		return roomZnodes{}, err
	}
	zn := roomZnodes{room: info.Path, epoch: info.Path + "/" + info.EpochZnode,
		election: info.Path + "/election"} // replica's election node (replica/doc.go, znode layout)
	// The newest channel may be sealed and deleted under the reads (a
	// checkpoint meanwhile): read again.
	for try := 1; ; try++ {
		zn.batch, err = nextBatch(ctx, c, p.cfg.room)
		if err == nil || try == 5 || !(errors.Is(err, logroom.ErrNoRoom) || errors.Is(err, zk.ErrNoNode)) {
			return zn, err
		}
	}
}

// nextBatch is the path of the batch znode the next append would create
// in room's newest channel.
func nextBatch(ctx context.Context, c *logroom.Client, room string) (string, error) {
	l, err := logroom.ListChannels(ctx, c, replica.DefaultBase, room)
	if err != nil {
		return "", err
	}
	if len(l.Nums) == 0 {
		return "", fmt.Errorf("room %s has no channel although a master leads it", room)
	}
	num := l.Nums[len(l.Nums)-1]
	ch, err := logroom.ReadChannel(ctx, c, replica.DefaultBase, room, num)
	if err != nil {
		return "", err
	}
	chPath := logroom.RoomPath(replica.DefaultBase, room, logroom.ChannelsZnode, logroom.ChannelName(num))
	kids, err := zkx.Children(ctx, c, chPath)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", chPath, err)
	}
	var last uint64
	for _, k := range kids {
		if first, ok := logroom.ParseBatchName(k); ok && first > last {
			last = first
		}
	}
	next := ch.FirstIndex
	if last != 0 {
		bp := chPath + "/" + logroom.BatchName(last)
		data, _, err := zkx.Get(ctx, c, bp)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", bp, err)
		}
		b, err := logroom.DecodeBatch(data)
		if err != nil {
			return "", fmt.Errorf("%s: %w", bp, err)
		}
		next = b.Last() + 1
	}
	return chPath + "/" + logroom.BatchName(next), nil
}

// tryMasterWrites tries, on conn, each write a master makes to take over
// the room, stand for election and append, and returns an error unless
// ZooKeeper refuses each with NoAuth. Each write is a Multi that ends with
// a check no write can pass (the room znode at a version it never
// reaches), so nothing of it lands even where ZooKeeper would allow it.
func (zn roomZnodes) tryMasterWrites(conn *zk.Conn) error {
	world := zk.WorldACL(zk.PermAll)
	never := &zk.CheckVersionRequest{Path: zn.room, Version: math.MaxInt32}
	for _, w := range []struct {
		what string
		op   any
	}{
		{"taking over: setting " + zn.epoch, &zk.SetDataRequest{Path: zn.epoch, Data: []byte("x"), Version: -1}},
		{"taking over: creating a writer token " + zn.epoch + "/w-0000000000000000",
			&zk.CreateRequest{Path: zn.epoch + "/w-0000000000000000", Acl: world}},
		{"standing for election: creating a candidate in " + zn.election,
			&zk.CreateRequest{Path: zn.election + "/c-00000000000000000000000000000000-", Flags: zk.FlagEphemeral | zk.FlagSequence, Acl: world}},
		{"appending: creating " + zn.batch, &zk.CreateRequest{Path: zn.batch, Data: []byte("x"), Acl: world}},
	} {
		res, err := conn.Multi(w.op, never)
		i := -1
		for j, r := range res {
			if r.Error != nil {
				i, err = j, r.Error
				break
			}
		}
		if i != 0 || !errors.Is(err, zk.ErrNoAuth) {
			return fmt.Errorf("%s got %v (at op %d of the Multi: the write itself is 0), want %v", w.what, err, i, zk.ErrNoAuth)
		}
	}
	return nil
}

// quorumTLSLine is what a ZooKeeper server logs when its quorum and
// election links are TLS (sslQuorum=true).
const quorumTLSLine = "Using TLS encrypted quorum communication"

// checkQuorumTLS checks that every server of a TLS ensemble with peers
// logged that its quorum links are TLS: otherwise every write the masters
// send over TLS crosses the server-to-server links in clear, and the
// RESULT's zk_tls would not hold.
func checkQuorumTLS(ens *zkensemble.Ensemble) error {
	if ens.Size() < 2 {
		return nil
	}
	for i := 0; i < ens.Size(); i++ {
		b, err := os.ReadFile(ens.LogPath(i))
		if err != nil {
			return fmt.Errorf("ZooKeeper quorum TLS check: %w", err)
		}
		if !strings.Contains(string(b), quorumTLSLine) {
			return fmt.Errorf("ZooKeeper quorum TLS check: server %d did not log %q (sslQuorum): its quorum links are in clear", i, quorumTLSLine)
		}
	}
	return nil
}

// workerIdentsText lists the chunk servers' identities as "cs1=SUBJECT".
func (p *pair) workerIdentsText() string {
	if len(p.zkWorkers) == 0 {
		return "no chunk servers"
	}
	var b []string
	for _, w := range p.zkWorkers {
		b = append(b, w+"="+p.zkWorkerIdents[w])
	}
	return strings.Join(b, " | ")
}

// checkWorkerACL checks, once the first two chunk servers joined and
// the assigner created their task directories, that the first one's
// certificate (cs1) lists its own directory but is refused (NoAuth)
// reading, creating and deleting in the second's (cs2), writing or
// deleting cs2's directory, forging a result in <dir>/results, and
// writing or deleting under the room.
func (p *pair) checkWorkerACL(ctx context.Context) error {
	if len(p.zkWorkers) < 2 {
		return nil
	}
	own, other := p.zkWorkers[0], p.zkWorkers[1]
	src, err := tlsfiles.Load(p.tls[own])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: logroom.SplitServers(p.zkConn), TLS: src})
	if err != nil {
		return fmt.Errorf("ZooKeeper worker ACL check: %s's certificate: connect: %w", own, err)
	}
	defer c.Close()
	conn := c.Conn()
	dir := chunkDir(p.cfg.room)
	ownDir, otherDir := dir+"/assign/"+own, dir+"/assign/"+other
	// The assigner creates each live worker's directory (exists needs
	// no permission).
	for _, d := range []string{ownDir, otherDir} {
		for {
			ok, _, err := conn.Exists(d)
			if err == nil && ok {
				break
			}
			if sleepCtx(ctx, 50*time.Millisecond) != nil {
				return fmt.Errorf("ZooKeeper worker ACL check: %s not created within 30s (last error %v)", d, err)
			}
		}
	}
	if _, _, err := conn.Children(ownDir); err != nil {
		return fmt.Errorf("ZooKeeper worker ACL check: %s's certificate listing its own directory %s: %w", own, ownDir, err)
	}
	zn, err := p.roomZnodes(ctx)
	if err != nil {
		return fmt.Errorf("ZooKeeper worker ACL check: %w", err)
	}
	room := zn.room
	acl := zkx.X509ACL(zk.PermAll, p.zkWorkerIdents[own])
	for _, op := range []struct {
		what string
		do   func() error
	}{
		{"listing " + otherDir, func() error { _, _, err := conn.Children(otherDir); return err }},
		{"creating " + otherDir + "/t-forged", func() error { _, err := conn.Create(otherDir+"/t-forged", []byte("x"), 0, acl); return err }},
		{"deleting " + otherDir + "/t-forged", func() error { return conn.Delete(otherDir+"/t-forged", -1) }},
		{"writing " + otherDir, func() error { _, err := conn.Set(otherDir, []byte("x"), -1); return err }},
		{"deleting " + otherDir, func() error { return conn.Delete(otherDir, -1) }},
		{"forging " + dir + "/results/t-forged", func() error { _, err := conn.Create(dir+"/results/t-forged", []byte("x"), 0, acl); return err }},
		{"writing " + zn.epoch, func() error { _, err := conn.Set(zn.epoch, []byte("x"), -1); return err }},
		{"deleting " + zn.epoch, func() error { return conn.Delete(zn.epoch, -1) }},
	} {
		if err := op.do(); !errors.Is(err, zk.ErrNoAuth) {
			return fmt.Errorf("ZooKeeper worker ACL check: %s's certificate %s got %v, want %v", own, op.what, err, zk.ErrNoAuth)
		}
	}
	p.step("ZooKeeper worker ACL check: %s's certificate lists its own task directory but is refused (%v) listing, creating and deleting in %s's, writing or deleting %s, forging a result, and writing or deleting under %s",
		own, zk.ErrNoAuth, other, otherDir, room)
	return nil
}
