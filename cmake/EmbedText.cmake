# cmake -DIN=file -DOUT=file.inc -P EmbedText.cmake: writes IN as one C++ raw string
# literal, to be #included where an expression is expected.
file(READ ${IN} text)
string(FIND "${text}" ")ATTEND_EMBED\"" found)
if(NOT found EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )ATTEND_EMBED\"")
endif()
file(WRITE ${OUT} "R\"ATTEND_EMBED(${text})ATTEND_EMBED\"\n")
