package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
)

// jsonMarshal encodes v without HTML escaping (prompts often hold <, > and &).
func jsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// deleted answers a successful DELETE of id with OpenAI's deletion object.
func deleted(c echo.Context, id, object string) error {
	return c.JSON(http.StatusOK, map[string]any{"id": id, "object": object, "deleted": true})
}
