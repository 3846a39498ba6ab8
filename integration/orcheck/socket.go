package orcheck

import "encoding/json"

// SocketTurn checks the server messages of one WebSocket-mode turn (docs/clients.md): every
// message is one event of the SSE stream, so every rule of Stream applies to them, except that no
// "data: [DONE]" frame follows the terminal event on a socket.
type SocketTurn struct{ st *Stream }

// NewSocketTurn starts checking one turn on a socket.
func (s *Schema) NewSocketTurn() *SocketTurn { return &SocketTurn{st: s.NewStream()} }

// Message checks one server message and reports whether it ended the turn (a terminal event).
func (k *SocketTurn) Message(msg []byte) (terminal bool) {
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(msg, &head) // a message that is not an object fails the event check
	frame := make([]byte, 0, len(msg)+len(head.Type)+16)
	frame = append(append(append(frame, "event: "...), head.Type...), "\ndata: "...)
	frame = append(append(frame, msg...), "\n\n"...)
	_, _ = k.st.Write(frame)
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	return k.st.terminal != ""
}

// Close ends the turn and returns every violation found.
func (k *SocketTurn) Close() error {
	k.st.mu.Lock()
	ended := k.st.terminal != ""
	k.st.mu.Unlock()
	if ended {
		_, _ = k.st.Write([]byte("data: [DONE]\n\n")) // the socket's end of turn is the terminal event itself
	}
	return k.st.Close()
}
