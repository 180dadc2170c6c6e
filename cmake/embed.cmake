# What the scripts that embed files in the binary share (store/embed_migrations.cmake,
# scheduler/embed_web.cmake): a file's bytes as a C array.

# ss_embed_array(<var> <file> <comment> <declaration>) appends to <var> the
# definition "/* <comment> */\n<declaration>[] = {...};" of an array holding
# <file>'s bytes, 16 to a line, and a NUL after them (not counted in the
# file's length), so no character needs escaping and text reads as a string.
function(ss_embed_array var file comment declaration)
  file(READ "${file}" hex HEX)
  string(REPEAT "[0-9a-f]" 32 line)
  string(REGEX REPLACE "(${line})" "\\1\n  " hex "${hex}")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  set(${var} "${${var}}/* ${comment} */\n${declaration}[] = {\n  ${bytes}0x00};\n\n" PARENT_SCOPE)
endfunction()
