package server

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// deleted answers a successful DELETE of id with OpenAI's deletion object.
func deleted(c echo.Context, id, object string) error {
	return c.JSON(http.StatusOK, map[string]any{"id": id, "object": object, "deleted": true})
}
