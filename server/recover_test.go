package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/respgate/respgate/wire"
)

func TestAPanickingHandlerIsLoggedWithItsValueAndStackAndAnswers500(t *testing.T) {
	var logs bytes.Buffer
	s, _ := newIntakeServer(t, Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"input":"BODY-SECRET"}`))
	c := s.echo.NewContext(req, httptest.NewRecorder())
	err := s.recoverMiddleware(func(c echo.Context) error {
		_, _ = io.ReadAll(c.Request().Body)
		panic(fmt.Errorf("boom: %w", errors.ErrUnsupported))
	})(c)
	var ae *wire.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusInternalServerError {
		t.Fatalf("got %v, want the 500 envelope", err)
	}
	var line struct {
		Msg   string `json:"msg"`
		Panic string `json:"panic"`
		Stack string `json:"stack"`
	}
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("log: %v: %s", err, logs.String())
	}
	if line.Panic != "boom: unsupported operation" {
		t.Errorf("panic value logged as %q", line.Panic)
	}
	if !strings.Contains(line.Stack, "goroutine ") || !strings.Contains(line.Stack, "recover_test.go") {
		t.Errorf("no stack of the panicking handler in the log: %q", line.Stack)
	}
	if strings.Contains(logs.String(), "BODY-SECRET") {
		t.Errorf("the request body reached the log")
	}
}
