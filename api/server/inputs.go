package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// maxImages bounds the images of one request: each costs a pass of the vision tower and up to the
// processor's pixel budget in tokens.
const maxImages = 16

// textOnly is the error for an image sent to a model that reads text only (one whose architecture
// has no vision tower in mlxg, or a checkpoint converted without its tower). field names what carried
// the image.
func textOnly(model, field string) error {
	return errorf(http.StatusBadRequest, "%q is a text-only model: mlxg cannot give it images; remove %s from the request", model, field)
}

// addImages attaches images read from OpenAI or Anthropic parts to msg, with where each stood.
func addImages(msg *api.Message, images []openai.Image) {
	for _, im := range images {
		msg.Images = append(msg.Images, api.ImageData(im.Data))
		msg.ImageAt = append(msg.ImageAt, im.At)
	}
}

// requestImages decodes the images of msgs in the order the chat template renders them. A model that
// reads text only gets textOnly; too many images, or one that does not decode (corrupt, truncated, an
// unknown format, no pixels, over the pixel limit), is a 400 that names it. field names the images
// of message i.
func requestImages(name string, hasVision func() bool, msgs []api.Message, field func(i int) string) ([]vision.Image, error) {
	n := 0
	for _, m := range msgs {
		n += len(m.Images)
	}
	if n == 0 {
		return nil, nil
	}
	if !hasVision() {
		for i, m := range msgs {
			if len(m.Images) > 0 {
				return nil, textOnly(name, field(i))
			}
		}
	}
	if n > maxImages {
		return nil, errorf(http.StatusBadRequest, "%d images in one request: mlxg takes at most %d", n, maxImages)
	}
	out := make([]vision.Image, 0, n)
	for i, m := range msgs {
		for k, data := range m.Images {
			rgb, err := vision.Decode(data, vision.DefaultLimits)
			if err != nil {
				return nil, errorf(http.StatusBadRequest, "%s[%d]: %v", field(i), k, err)
			}
			out = append(out, vision.NewImage(rgb))
		}
	}
	return out, nil
}

// visionModel reports whether the job's checkpoint reads images here: it holds a tower mlxg runs
// (runner/model.HasVision) and this server's engines run towers.
func (s *Server) visionModel(j *job) func() bool {
	return func() bool { return j.lm != nil && s.enginesSeeImages() && model.HasVision(j.lm.Dir) }
}

// enginesSeeImages reports whether the server's engines run vision towers: models on a backend with
// compute.VisionContext (the CPU and MLX backends have it), whole or split over machines (rank 0 runs
// the tower).
func (s *Server) enginesSeeImages() bool {
	el, ok := s.cfg.Loader.(*EngineLoader)
	if !ok {
		return true // a loader of its own (tests): the model says
	}
	return el.Backend == nil || compute.Supports[compute.VisionContext](el.Backend, "images") == nil
}

// fimList names the fill-in-the-middle token sets mlxg knows, for the error a suffix gets.
func fimList() string {
	var out []string
	for _, f := range fimConventions {
		out = append(out, strings.Join(f[:], " "))
	}
	return strings.Join(out, "; ")
}

// messageField names message i's images in an error.
func messageField(i int) string { return fmt.Sprintf("messages[%d].images", i) }
