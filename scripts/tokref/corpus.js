// The conformance corpus: several languages and scripts, emoji and ZWJ sequences, code, runs of
// spaces, tabs and newlines, numbers, contractions, special tokens written inside text, very long
// words and the empty string. gen.js writes it to text/tokenizer/testdata/corpus.json.
const longWord = "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(12);
const corpus = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space and trailing space ",
    "  two leading spaces",
    "a  b   c    d     e",
    "tabs\tand\t\ttabs\t\t\t end",
    "line one\nline two\n\nline four\n\n\n\nlast",
    "windows\r\nline\r\n\r\nends\r",
    "trailing newline\n",
    "\n\n\n",
    "   \n   \n\t\n ",
    "spaces before newline   \nand after\n   x",
    // contractions, cases, apostrophes
    "I'm sure you're right, it's what they've said and we'll see; he'd know. Don't! I'M SURE YOU'RE IT'S THEY'VE WE'LL HE'D",
    "it'ſ it'S IT'LL x'K 'tis ''s '' ' s",
    "O'Reilly's rock 'n' roll",
    // numbers
    "1 12 123 1234 12345 123456 1234567",
    "3.14159 2,718 1e10 -42 +7 0x1F 1_000_000",
    "Call 555-0199 on 2024-07-04 at 10:30pm, or ¹²³ ½ ⅓ Ⅻ ٣٤٥ ४२",
    // code
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "func main() {\n\tfmt.Println(\"héllo\")\n\tx := []int{1, 2, 3}\n}\n",
    "for (let i = 0; i < 10; i++) { console.log(`v=${i}`); } // done",
    "#include <stdio.h>\nint main(void){printf(\"%d\\n\",42);return 0;}",
    "SELECT * FROM users WHERE name = 'O''Brien' AND age >= 21;",
    "<div class=\"x\"><p>Hello &amp; bye</p></div>",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "    indented four\n        indented eight\n\t\ttabbed",
    "a!!b??c...d---e___f***g###h$$$",
    "~!@#$%^&*()_+-=[]{}|;':\",./<>?`",
    // scripts
    "Grüße aus München! Çà et là, naïve café, ñandú, Øresund, Łódź.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός",
    "日本語のテキストです。東京は大きい都市ですね！",
    "中文文本测试：我爱北京天安门，天安门上太阳升。",
    "한국어 문장입니다. 안녕하세요!",
    "مرحبا بالعالم، هذه جملة عربية.",
    "שלום עולם, זה משפט בעברית.",
    "नमस्ते दुनिया, यह हिंदी वाक्य है।",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "Tiếng Việt có dấu: Điều này thật tuyệt vời.",
    "ქართული ენა, Հայերեն լեզու, አማርኛ ቋንቋ",
    "ᚠᛇᚻ᛫ᛒᛦᚦ runes and 𐌰𐌱𐌲 gothic and 𝕄𝕒𝕥𝕙 𝑥²",
    // emoji, ZWJ, flags, skin tones, variation selectors
    "😀 😃 😄 😁 😆 🥹 🫠",
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🇺🇸🇯🇵 flags, ❤️ heart, 👍🏿",
    "emoji👍inside🎉words",
    // normalization: combining marks (NFC changes them), compatibility forms
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, \u1e9b\u0323, ﬁ ligature, ｆｕｌｌｗｉｄｔｈ, ℌ",
    "Kelvin \u212a, Angstrom \u212b, Ohm \u2126",
    "jamo \u1100\u1161\u11a8 composes, a\u0308\u0301 stacked, Z\u0351\u0300\u0322a\u0336l\u0334g\u0338o",
    // characters newer than Unicode 15.0 (Go's tables): Garay, Kirat Rai, legacy computing
    "new \u{10D40}\u{10D41} \u{16D40}\u{16D41}x \u{1CC00}\u{1CCF0}7",
    // unusual spaces and controls
    "nbsp\u00a0here, ideographic\u3000space\u3000\u3000twice, em\u2003space, thin\u2009space",
    "nel\u0085line, ls\u2028ps\u2029end, zwsp\u200bzwj\u200dzwnj\u200c, bom\ufeffx",
    "controls \u0000\u0001\u0007\u001b[31mred\u001b[0m\u007f",
    "soft\u00adhyphen and word\u2060joiner",
    "replacement \ufffd char and private \ue000 use",
    // very long words and runs
    longWord,
    "x".repeat(600),
    "ab".repeat(300) + " " + "🙂".repeat(40),
    " ".repeat(40) + "\t".repeat(20) + "\n".repeat(20),
    "-".repeat(120) + "=".repeat(80),
    "9".repeat(100),
    // mixed
    "The quick brown fox (狐狸) jumps over 13 lazy dogs 🐕 in 2.5s — «quotes» “curly” ‘single’ …",
    "Mixed: English, русский, 日本語, العربية, हिन्दी, 😀, and code `x := 1`.",
];

// Special tokens written inside text, per family (all are tried on every tokenizer:
// a family without the token must split it like ordinary text).
const specials = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>",
    "<|endoftext|>text after eot<|endoftext|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|reserved_special_token_5|>x<|python_tag|>",
    "<s>[INST] Hi [/INST] Hello </s><s>[INST] again [/INST]",
    "text<s>glued</s>text <unk> <s> spaced </s> ",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n",
    "<start_of_image> <image_soft_token><end_of_image><pad><eos>",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c><\uff5cUser\uff5c>Hi<\uff5cAssistant\uff5c>Hello<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>get_weather\n```json\n{}\n```<\uff5ctool\u2581call\u2581end\uff5c><|EOT|>",
    "<|im_start|<|im_start|>><|im_end|im_end|> almost <|im_start",
    "<table><tr><td>cell</td></tr></table> <h1>Title</h1>",
    "\u2581\u2581 literal metaspace \u2581x",
    "text\n<|im_end|>\n\n<|im_start|> spaced <|im_end|>  <|endoftext|>\t</s>\n<end_of_turn> <eos>",
];

module.exports = corpus.concat(specials);
