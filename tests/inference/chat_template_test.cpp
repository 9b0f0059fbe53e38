#include "weir/inference/chat_template.hpp"

#include <gtest/gtest.h>

namespace weir::inference {
namespace {

const std::vector<ChatTurn> kTurns = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Sum 2+2"}};

TEST(ChatTemplate, RendersEachFamilyExactly) {
  EXPECT_EQ(
      apply_chat_template(ChatFamily::chatml, kTurns),
      "<|im_start|>system\nBe "
      "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
      "<|im_start|>user\nSum 2+2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(ChatFamily::llama3, {{"user", "Hi"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|"
            "end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatFamily::phi3, {{"system", "S"}, {"user", "Hi"}}),
            "<|system|>\nS<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(apply_chat_template(ChatFamily::gemma, kTurns),
            "<start_of_turn>user\nBe "
            "brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nSum 2+2<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(
      apply_chat_template(ChatFamily::llama2, kTurns),
      "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello.</s><s>[INST] Sum 2+2 [/INST]");
  EXPECT_EQ(apply_chat_template(ChatFamily::mistral, kTurns),
            "[INST] Be brief.\n\nHi [/INST] Hello.</s><s>[INST] Sum 2+2 [/INST]");
}

TEST(ChatTemplate, DetectsFamiliesAndRefusesUnknownTemplatesClearly) {
  EXPECT_EQ(*detect_chat_family("{% for m in messages %}<|im_start|>{{ m.role }}"),
            ChatFamily::chatml);
  EXPECT_EQ(*detect_chat_family("<|start_header_id|>"), ChatFamily::llama3);
  EXPECT_EQ(*detect_chat_family("[INST] <<SYS>>"), ChatFamily::llama2);
  EXPECT_EQ(*detect_chat_family("[INST] {{ m.content }} [/INST]"), ChatFamily::mistral);
  EXPECT_EQ(*detect_chat_family("<|user|>{{x}}<|end|>"), ChatFamily::phi3);
  EXPECT_EQ(*detect_chat_family("<start_of_turn>"), ChatFamily::gemma);
  auto bad = detect_chat_family("{{ weird }}");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(Errc::unsupported));
  EXPECT_NE(
      bad.error().message.find("known families: llama2, llama3, chatml, mistral, phi3, gemma"),
      std::string::npos);
  EXPECT_EQ(*parse_chat_family("gemma"), ChatFamily::gemma);
  EXPECT_FALSE(parse_chat_family("alpaca"));
}

}  // namespace
}  // namespace weir::inference
