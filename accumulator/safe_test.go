package accumulator

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// TestNothingSecretIsPrinted plants a secret in text, reasoning and arguments and checks that no
// fmt verb and no slog record of the package's types shows it, nor any error Feed returns.
func TestNothingSecretIsPrinted(t *testing.T) {
	const secret = "SECRET-7f3a"
	evs := []wire.Event{
		textDelta(0, 0, "the "+secret),
		reasonDelta(1, 0, secret),
		ev(string(wire.EventArgsDelta), "output_index", 2, "delta", `{"k":"`+secret+`"}`),
		rawEv(string(wire.EventTextDelta), `{"output_index":3,"delta":"`+secret+`","content_index":-1}`), // an error
	}
	a := New(testOptions())
	var out []byte
	var ferr error
	for _, e := range evs {
		if out, ferr = a.Feed(out, e); ferr != nil {
			break
		}
	}
	_, res := a.Close(out, ferr)
	s := a.snapshot(res.Status, res.Output)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	// wire.Item and wire.Event have no LogValue (slog would marshal their content): not logged here.
	log.Info("turn", "result", res, "acc", a, "snapshot", &s, "err", ferr)
	var printed strings.Builder
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		fmt.Fprintf(&printed, verb+" "+verb+" "+verb+" "+verb+"\n", res, a, &s, res.Output[0])
	}
	if ferr == nil || !strings.Contains(string(out), secret) {
		t.Fatal("the test did not plant its secret")
	}
	for what, text := range map[string]string{"slog": logs.String(), "fmt": printed.String(), "error": ferr.Error()} {
		if strings.Contains(text, secret) {
			t.Errorf("%s shows the secret:\n%s", what, text)
		}
	}
}

// The safe summaries themselves: what they say, and that a nil value prints as nil (a log line of a
// turn that failed before its result existed).
func TestSafeSummaries(t *testing.T) {
	a := New(testOptions())
	out, _ := a.Feed(nil, textDelta(0, 0, "x"))
	out, _ = a.Feed(out, completed("completed"))
	_, res := a.Close(out, nil)
	s := a.snapshot(res.Status, res.Output)
	failed := &Result{Status: wire.StatusFailed, Error: &wire.ErrorObject{Code: "server_error"}}
	for _, c := range []struct {
		v    fmt.Stringer
		want string
	}{
		{(*Result)(nil), "accumulator.Result(nil)"},
		{(*Snapshot)(nil), "accumulator.Snapshot(nil)"},
		{(*Accumulator)(nil), "accumulator.Accumulator(nil)"},
		{res, "accumulator.Result{status=completed items=1 dropped=0 error=}"},
		{failed, "accumulator.Result{status=failed items=0 dropped=0 error=server_error}"},
		{&s, "accumulator.Snapshot{id=resp_test status=completed items=1}"},
		{a, "accumulator.Accumulator{id=resp_test items=1 seq=8 done=true dropped=0}"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
