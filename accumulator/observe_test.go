package accumulator

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/respgate/respgate/wire"
)

func TestObserveSeesEveryClientEventAsWritten(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			type seen struct {
				seq  int64
				typ  wire.EventType
				data []byte
			}
			var observed []seen
			opts := testOptions()
			opts.Observe = func(seq int64, typ wire.EventType, data []byte) {
				observed = append(observed, seen{seq, typ, bytes.Clone(data)})
			}
			stream, _, _, _ := replay(readTrace(t, tf), opts)
			evs, err := parseClientStream(stream)
			if err != nil {
				t.Fatal(err)
			}
			if len(observed) != len(evs) {
				t.Fatalf("observed %d events, the stream has %d", len(observed), len(evs))
			}
			for i, ev := range evs {
				o := observed[i]
				if o.seq != int64(i) || string(o.typ) != ev.Type || !bytes.Equal(o.data, ev.Data) ||
					string(ev.obj["sequence_number"]) != strconv.Itoa(i) {
					t.Fatalf("event %d: observed %d %s %s, streamed %s %s", i, o.seq, o.typ, o.data, ev.Type, ev.Data)
				}
			}
		})
	}
}
