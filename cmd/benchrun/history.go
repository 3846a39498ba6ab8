package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
)

// benchKey is the bearer key of every benchmark request; its tenant is computed with the
// server's own function (server.TenantOf) over the secret stored in the arm's database.
const benchKey = "bench"

// backendStore opens, in this process, the store of a respgate arm (D: Postgres, E: SQLite) and
// returns the tenant of benchKey in it.
func (b *bench) backendStore(ctx context.Context, name string) (store.Store, string, error) {
	dsn := b.pgDSN
	if name == "E" {
		dsn = "sqlite:" + filepath.Join(b.sqliteDir, "E.db")
	}
	st, err := openStore(ctx, dsn)
	if err != nil {
		return nil, "", err
	}
	up, err := upstream.New(upstream.Config{BaseURL: b.sim.baseURL()})
	if err != nil {
		st.Close()
		return nil, "", err
	}
	srv, err := server.New(ctx, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, upstream.Single(up))
	if err != nil {
		st.Close()
		return nil, "", err
	}
	return st, srv.TenantOf(benchKey), nil
}

// openStore opens the store at dsn in this process, as bin/respgate opens it.
func openStore(ctx context.Context, dsn string) (store.Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgres.Open(ctx, dsn)
	case strings.HasPrefix(dsn, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	}
	return nil, errors.New("database url must be a postgres:// or sqlite: URL")
}

// one sends a single request and returns its sample (an error if it failed).
func (b *bench) one(ctx context.Context, a *arm, body []byte, keepTerminal bool) (loadgen.Sample, error) {
	rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Requests: 1, KeepTerminal: keepTerminal,
		Body: constBody(body)})
	if err != nil {
		return loadgen.Sample{}, err
	}
	s := rs.samples[0]
	if !s.OK() {
		p := s.Err
		if p == "" && len(s.Check.Problems) > 0 {
			p = s.Check.Problems[0]
		}
		return s, fmt.Errorf("%s: request failed: %s", a.Name, p)
	}
	return s, nil
}

// nextNonce is a fresh nonce of fixed width (no nonce is a prefix of another).
func (b *bench) nextNonce() string {
	b.nonceSeq++
	return fmt.Sprintf("%sc%08d", nonceMark, b.nonceSeq)
}

// noncePlaceholder has a nonce's width; a body built once with it is re-tagged per request by
// replacing it.
var noncePlaceholder = nonceMark + "c00000000"

func retag(body []byte, nonce string) []byte {
	return bytes.Replace(body, []byte(noncePlaceholder), []byte(nonce), 1)
}

// oneTagged sends one request whose body carries nonce and also returns its time to upstream:
// from the client sending it to the simulator holding the whole request (µs).
func (b *bench) oneTagged(ctx context.Context, a *arm, body []byte, nonce string, keepTerminal bool) (loadgen.Sample, float64, error) {
	rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Requests: 1, KeepTerminal: keepTerminal,
		Body: constBody(body)})
	if err != nil {
		return loadgen.Sample{}, 0, err
	}
	s := rs.samples[0]
	if !s.OK() {
		p := s.Err
		if p == "" && len(s.Check.Problems) > 0 {
			p = s.Check.Problems[0]
		}
		return s, 0, fmt.Errorf("%s: request failed: %s", a.Name, p)
	}
	m, err := b.stamps(nonce)
	if err != nil {
		return s, 0, err
	}
	st := m[nonce]
	if st == nil {
		return s, 0, fmt.Errorf("%s: the simulator saw no request tagged %s", a.Name, nonce)
	}
	send := rs.started.UnixNano() + int64(s.Start)
	return s, float64(st.Body-send) / 1e3, nil
}
