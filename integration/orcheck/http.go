package orcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
)

// Wrap arranges for res to be checked as the caller reads it, and calls report once with the
// result (nil when it conforms):
//
//   - text/event-stream: every event as it passes (Stream); the end-of-stream rules apply when the
//     body is read to its end; a caller that closes it early gets only the per-event checks;
//   - application/json whose top-level "object" is "response": the ResponseResource schema.
//
// Anything else (error envelopes, lists, conversations) is passed through unchecked. what names
// the exchange in the report (e.g. "POST /v1/responses").
func (s *Schema) Wrap(res *http.Response, what string, report func(what string, err error)) {
	if res == nil || res.Body == nil {
		return
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		res.Body = &checkedStream{rc: res.Body, st: s.NewStream(), what: what, report: report}
	case "application/json":
		b, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(b))
		if err != nil {
			return
		}
		var head struct {
			Object string `json:"object"`
		}
		if json.Unmarshal(b, &head) == nil && head.Object == "response" {
			report(what, s.Response(b))
		}
		if head.Object == "response.compaction" {
			report(what, s.Compaction(b))
		}
	}
}

type checkedStream struct {
	rc     io.ReadCloser
	st     *Stream
	what   string
	report func(string, error)
	once   sync.Once
	eof    bool
}

func (c *checkedStream) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if n > 0 {
		_, _ = c.st.Write(p[:n])
	}
	if errors.Is(err, io.EOF) {
		c.eof = true
		c.finish()
	}
	return n, err
}

func (c *checkedStream) Close() error {
	c.finish()
	return c.rc.Close()
}

func (c *checkedStream) finish() {
	c.once.Do(func() {
		if c.eof {
			c.report(c.what, c.st.Close())
			return
		}
		c.st.mu.Lock()
		errs := errors.Join(c.st.errs...)
		c.st.mu.Unlock()
		if errs != nil {
			errs = fmt.Errorf("(stream closed by the client before its end) %w", errs)
		}
		c.report(c.what, errs)
	})
}
