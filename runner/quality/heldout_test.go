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

func TestPassage(t *testing.T) {
	got, err := passage("Contents\n1 Intro\n2 Use\n\r\n1 Intro\nText.\r\n", "1 Intro", 2)
	if err != nil || got != "1 Intro\nText.\n" {
		t.Errorf("passage = %q, %v", got, err)
	}
	if _, err := passage("1 Intro", "1 Intro", 2); err == nil {
		t.Error("passage of a missing second occurrence: no error")
	}
}
