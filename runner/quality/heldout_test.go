package quality

import "testing"

func TestHTMLProse(t *testing.T) {
	page := `<html><head><title>T</title><style>p{}</style></head><body>
<div class="nav"><a href="x">Menu</a></div>
<h1 align="center">When to  use it</h1>
<p>One &amp; two,
   three.</p><script>var x = "<p>no</p>";</script>
<ul><li>first <b>bold</b></li><li>second&nbsp;item</li></ul><p>Last</body></html>`
	got := htmlProse(page)
	want := "When to use it\n\nOne & two, three.\n\nfirst bold\n\nsecond item\n\nLast"
	if got != want {
		t.Errorf("htmlProse = %q\nwant %q", got, want)
	}
}
