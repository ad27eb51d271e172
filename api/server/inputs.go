package server

import (
	"net/http"
	"strings"
)

// textOnly is the error for an image sent to a model: every model mlxg runs reads text
// only (a multimodal checkpoint runs without its vision tower). field names what carried
// the image.
func textOnly(model, field string) error {
	return errorf(http.StatusBadRequest, "%q is a text-only model: mlxg cannot give it images; remove %s from the request", model, field)
}

// fimList names the fill-in-the-middle token sets mlxg knows, for the error a suffix gets.
func fimList() string {
	var out []string
	for _, f := range fimConventions {
		out = append(out, strings.Join(f[:], " "))
	}
	return strings.Join(out, "; ")
}
